"""The search: successive halving over the candidates that survived pruning.

Rung 0 measures every candidate with ``requests_per_point`` requests per load; each later rung
measures the best ``1 / keep_ratio`` of the previous one (at least one) with ``growth`` times
as many, best first, so that a budget cut leaves out the weakest. Ranking: the candidates that
meet every SLO at some load first, by their throughput at the best such load; then the others,
by their highest throughput. Starts are counted in the time spent.

Every finished step is in the journal before the next begins; a rerun with the same arguments
skips what the journal holds and takes the same decisions (they depend on the measurements only).

The budget, whichever comes first: ``max_measurements`` (bench runs, counted over every session
of the tune), or ``time_budget_s`` (seconds of starts and measurements over every session; a run
is not begun when the time spent plus what such a run took so far would pass it).

    tuner = Tuner(settings, candidates, deployer, measurer, journal, slos)
    outcome = tuner.run()
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from modelyard.errors import InvalidInput
from modelyard.tune.contract import CandidateStartFailed, Deployer, SilentProgress, TuneProgress
from modelyard.tune.endpoint import Endpoint
from modelyard.tune.journal import Journal, StartRecord
from modelyard.tune.measurement import Measurement
from modelyard.tune.pruning import Dropped
from modelyard.tune.slo import Slo
from modelyard.tune.space import Candidate

logger = logging.getLogger(__name__)


class Measurer(Protocol):
    def measure(
        self,
        candidate: Candidate,
        endpoint: Endpoint,
        rung: int,
        requests_per_point: int,
        record_dir: Path,
        *,
        final: bool = False,
    ) -> Measurement:
        """One bench run; ``final``: the last rung (where the load may be searched too)."""
        ...


@dataclass(frozen=True)
class TuneSettings:
    rungs: int = 3
    """How many rounds of halving (the last one measures the fewest, longest)."""
    requests_per_point: int = 32
    """Rung 0's requests per load point; rung ``n`` has ``requests_per_point x growth^n``."""
    growth: int = 2
    keep_ratio: int = 2
    """Each rung keeps the best ``1 / keep_ratio`` of the previous one."""
    max_measurements: int | None = None
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.rungs <= 8:
            problems.append(f"rungs {self.rungs} is not between 1 and 8")
        if not 1 <= self.requests_per_point <= 100_000:
            problems.append(f"requests per point {self.requests_per_point} is not between 1 and 100,000")
        if not 1 <= self.growth <= 10:
            problems.append(f"growth {self.growth} is not between 1 and 10")
        if not 2 <= self.keep_ratio <= 10:
            problems.append(f"keep ratio {self.keep_ratio} is not between 2 and 10")
        if self.max_measurements is not None and self.max_measurements < 1:
            problems.append(f"--max-runs {self.max_measurements} must be at least 1")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            problems.append(f"--budget {self.time_budget_s:g} s must be above 0")
        if problems:
            raise InvalidInput(
                "tune settings are invalid: " + "; ".join(problems), hint="see modelyard tune --help"
            )

    def requests_at(self, rung: int) -> int:
        return int(self.requests_per_point * self.growth**rung)


@dataclass
class TuneOutcome:
    """The search's result: every measurement (by candidate, deepest rung last), the ranking of
    the last rung measured, the candidates dropped while running, and why the search stopped."""

    ranking: list[Candidate]
    measurements: dict[str, list[Measurement]]
    dropped: list[Dropped] = field(default_factory=list)
    stopped_reason: str = "every rung measured"
    measurements_taken_now: int = 0

    def latest(self, candidate_id: str) -> Measurement | None:
        found = self.measurements.get(candidate_id)
        return found[-1] if found else None


class Tuner:
    def __init__(
        self,
        settings: TuneSettings,
        candidates: Sequence[Candidate],
        deployer: Deployer,
        measurer: Measurer,
        journal: Journal,
        slos: list[Slo],
        *,
        progress: TuneProgress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.candidates = list(candidates)
        self.deployer = deployer
        self.measurer = measurer
        self.journal = journal
        self.slos = slos
        self.progress = progress or SilentProgress()
        self.clock = clock
        self._running: tuple[Candidate, Endpoint] | None = None
        self._dropped: list[Dropped] = []
        self._taken_now = 0

    # -- the budget --------------------------------------------------------------------------------

    def _typical_seconds(self, rung: int, needs_start: bool) -> float:
        """What the next run is expected to take: the mean of the runs of this rung so far (else
        of the rung before, times the growth), plus the mean start when it needs one."""
        same = [m.duration_s for (_, level), m in self.journal.measurements.items() if level == rung]
        before = [m.duration_s for (_, level), m in self.journal.measurements.items() if level == rung - 1]
        expected = (
            sum(same) / len(same)
            if same
            else (sum(before) / len(before) * self.settings.growth if before else 0.0)
        )
        starts = [record.seconds for record in self.journal.starts if record.failed_reason is None]
        if needs_start and starts:
            expected += sum(starts) / len(starts)
        return expected

    def _budget_stop(self, candidate: Candidate, rung: int) -> str | None:
        count = len(self.journal.measurements)
        limit = self.settings.max_measurements
        if limit is not None and count >= limit:
            return f"run budget spent: {count} of {limit} bench runs taken (--max-runs)"
        budget = self.settings.time_budget_s
        if budget is not None:
            needs_start = self._running is None or self._running[0] != candidate
            expected = self._typical_seconds(rung, needs_start)
            spent = self.journal.spent_s
            if spent + expected > budget:
                return (
                    f"time budget spent: {spent:.0f} s of {budget:.0f} s used, and the next run "
                    f"({candidate.label}, rung {rung}) would take about {expected:.0f} s (--budget)"
                )
        return None

    # -- deployments -------------------------------------------------------------------------------

    def _stop_running(self) -> None:
        if self._running is not None:
            candidate = self._running[0]
            self._running = None
            self.deployer.stop(candidate)

    def _endpoint_for(self, candidate: Candidate) -> Endpoint | None:
        if self._running is not None and self._running[0] == candidate:
            return self._running[1]
        self._stop_running()
        self.progress.candidate_starting(candidate)
        began_s = self.clock()
        try:
            endpoint = self.deployer.start(candidate)
        except CandidateStartFailed as error:
            seconds = self.clock() - began_s
            reason = str(error)  # its hint included, once
            self.journal.add_start(StartRecord(candidate.candidate_id, seconds, reason))
            self._drop(Dropped(candidate, "start", reason))
            self.deployer.stop(candidate)
            return None
        except BaseException:
            # Interrupted while it started (Ctrl-C): its deployment may exist already, and nothing
            # else knows of it (it is not running yet), so it goes now.
            self.deployer.stop(candidate)
            raise
        seconds = self.clock() - began_s
        self.journal.add_start(StartRecord(candidate.candidate_id, seconds))
        self._running = (candidate, endpoint)
        self.progress.candidate_started(candidate, seconds)
        return endpoint

    def _drop(self, dropped: Dropped) -> None:
        self._dropped.append(dropped)
        self.progress.candidate_dropped(dropped)

    # -- the search --------------------------------------------------------------------------------

    def _rank(self, candidates: list[Candidate], rung: int) -> list[Candidate]:
        measured = [c for c in candidates if (c.candidate_id, rung) in self.journal.measurements]
        return sorted(
            measured,
            key=lambda c: self.journal.measurements[(c.candidate_id, rung)].score(self.slos),
            reverse=True,
        )

    def _measure_rung(self, survivors: list[Candidate], rung: int) -> str | None:
        """Measure every survivor at ``rung``; the reason the budget stopped it, or None."""
        requests = self.settings.requests_at(rung)
        for candidate in survivors:
            key = (candidate.candidate_id, rung)
            if key in self.journal.measurements:
                continue
            failed = self.journal.failed_start(candidate.candidate_id)
            if failed is not None:
                if not any(d.candidate == candidate for d in self._dropped):
                    self._drop(Dropped(candidate, "start", failed))
                continue
            stop = self._budget_stop(candidate, rung)
            if stop is not None:
                return stop
            endpoint = self._endpoint_for(candidate)
            if endpoint is None:
                continue
            self.progress.measurement_started(candidate, rung, requests)
            measurement = self.measurer.measure(
                candidate,
                endpoint,
                rung,
                requests,
                self.journal.record_dir(candidate.candidate_id, rung),
                final=rung == self.settings.rungs - 1,
            )
            self.journal.add_measurement(measurement)
            self._taken_now += 1
            if measurement.best_point(self.slos) is None and not any(p.valid for p in measurement.points):
                logger.info("%s: no valid load point at rung %d", candidate.label, rung)
            self.progress.measurement_finished(candidate, measurement)
        return None

    def run(self) -> TuneOutcome:
        survivors = list(self.candidates)
        ranking: list[Candidate] = []
        stopped = "every rung measured"
        try:
            for rung in range(self.settings.rungs):
                stop = self._measure_rung(survivors, rung)
                ranked = self._rank(survivors, rung)
                if ranked:
                    ranking = ranked + [c for c in ranking if c not in ranked]
                if stop is not None:
                    stopped = stop
                    break
                if not ranked:
                    stopped = "no candidate could be measured"
                    break
                if rung == self.settings.rungs - 1:
                    break
                keep = max(1, math.ceil(len(ranked) / self.settings.keep_ratio))
                survivors = ranked[:keep]
                self.progress.rung_finished(rung, survivors)
        finally:
            self._stop_running()
        measurements: dict[str, list[Measurement]] = {}
        for (candidate_id, _rung), measurement in sorted(
            self.journal.measurements.items(), key=lambda item: item[0][1]
        ):
            measurements.setdefault(candidate_id, []).append(measurement)
        return TuneOutcome(
            ranking=ranking,
            measurements=measurements,
            dropped=self._dropped,
            stopped_reason=stopped,
            measurements_taken_now=self._taken_now,
        )
