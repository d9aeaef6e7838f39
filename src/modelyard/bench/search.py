"""Automatic search over load: the saturation knee, and the highest load that meets SLOs.

Both searches bracket first (the load grows by ``growth_factor`` from ``start_load`` until the
condition flips, or ``max_load`` is reached), then bisect inside the bracket until it is narrower
than ``tolerance_ratio`` (or one step, for integer concurrencies) or ``max_steps`` measurements
were taken. Each measurement is one load point run by the benchmark runner; the search only sees
``measure(load) -> LoadPointResult``, so a deterministic fake drives it in tests.

- SLO search: the highest load whose point is valid and whose SLO attainment (over requests sent,
  errors counting as misses) is at least ``required_attainment``.
- Knee search: the lowest load whose throughput reaches ``saturation_fraction`` of the highest
  throughput measured; past it, more load buys latency, not throughput.

Usage::

    measure = runner_measure(config, api_key=None)
    outcome = await search_slo_load(measure, SearchSettings(load_kind="rate", start_load=1.0))
    print(outcome.found_load, outcome.reason)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from modelyard.bench.records import BenchPrompt, LoadKind, LoadPoint, LoadPointResult, RunConfig
from modelyard.errors import InvalidInput

logger = logging.getLogger(__name__)

Measure = Callable[[float], Awaitable[LoadPointResult]]
SearchKind = Literal["knee", "slo"]


@dataclass(frozen=True)
class SearchSettings:
    load_kind: LoadKind = "concurrency"
    start_load: float = 1.0
    max_load: float = 1024.0
    min_load: float = 0.1
    """Lowest load an SLO search tries when even ``start_load`` misses (rates; concurrency stops at 1)."""
    growth_factor: float = 2.0
    tolerance_ratio: float = 0.05
    max_steps: int = 16
    required_attainment: float = 0.99
    saturation_fraction: float = 0.95

    def __post_init__(self) -> None:
        problems = []
        if self.start_load <= 0 or self.max_load < self.start_load:
            problems.append(f"need 0 < start_load <= max_load, got {self.start_load} and {self.max_load}")
        if self.growth_factor <= 1.0:
            problems.append(f"growth_factor must be > 1, got {self.growth_factor}")
        if not 0.0 < self.required_attainment <= 1.0:
            problems.append(f"required_attainment must be in (0, 1], got {self.required_attainment}")
        if not 0.0 < self.saturation_fraction < 1.0:
            problems.append(f"saturation_fraction must be in (0, 1), got {self.saturation_fraction}")
        if self.max_steps < 2:
            problems.append(f"max_steps must be >= 2, got {self.max_steps}")
        if problems:
            raise InvalidInput("search settings are invalid: " + "; ".join(problems))


@dataclass(frozen=True)
class SearchStep:
    """One measurement of the search, in the order taken."""

    load: float
    throughput_per_s: float
    throughput_unit: str
    attainment: float | None
    valid: bool
    passed: bool


@dataclass
class SearchOutcome:
    kind: SearchKind
    settings: SearchSettings
    found_load: float | None
    reason: str
    steps: list[SearchStep] = field(default_factory=list)
    results: dict[float, LoadPointResult] = field(default_factory=dict)

    def ordered_results(self) -> list[LoadPointResult]:
        """Every measured point, by load (for a report of throughput and latency against load)."""
        return [self.results[load] for load in sorted(self.results)]

    def to_json(self) -> dict[str, Any]:
        adapter: TypeAdapter[list[LoadPointResult]] = TypeAdapter(list[LoadPointResult])
        return {
            "kind": self.kind,
            "settings": self.settings.__dict__,
            "found_load": self.found_load,
            "reason": self.reason,
            "steps": [step.__dict__ for step in self.steps],
            "points": adapter.dump_python(self.ordered_results(), mode="json"),
        }


def throughput_of(result: LoadPointResult) -> tuple[float, str]:
    """Output tokens/s when every request had usage, else requests/s."""
    if result.output_token_throughput_per_s is not None:
        return result.output_token_throughput_per_s, "output tokens/s"
    return result.request_throughput_per_s, "requests/s"


class _Search:
    def __init__(self, kind: SearchKind, measure: Measure, settings: SearchSettings) -> None:
        self.kind: SearchKind = kind
        self.measure = measure
        self.settings = settings
        self.outcome = SearchOutcome(kind=kind, settings=settings, found_load=None, reason="")

    @property
    def integer(self) -> bool:
        return self.settings.load_kind == "concurrency"

    def normalize(self, load: float) -> float:
        load = min(load, self.settings.max_load)
        return float(max(1, round(load))) if self.integer else load

    def budget_left(self) -> bool:
        return len(self.outcome.steps) < self.settings.max_steps

    async def point(self, load: float, passes: Callable[[LoadPointResult], bool]) -> LoadPointResult:
        load = self.normalize(load)
        cached = self.outcome.results.get(load)
        if cached is not None:
            return cached
        result = await self.measure(load)
        throughput, unit = throughput_of(result)
        self.outcome.results[load] = result
        self.outcome.steps.append(
            SearchStep(
                load=load,
                throughput_per_s=throughput,
                throughput_unit=unit,
                attainment=None if result.goodput is None else result.goodput.attainment,
                valid=result.valid,
                passed=passes(result),
            )
        )
        logger.info("search %s: load %g -> %.1f %s", self.kind, load, throughput, unit)
        return result

    def narrow_enough(self, low: float, high: float) -> bool:
        if self.integer:
            return high - low <= 1
        return (high - low) <= self.settings.tolerance_ratio * high

    def middle(self, low: float, high: float) -> float:
        if self.integer:
            return float(math.floor((low + high) / 2))
        return math.sqrt(low * high) if low > 0 else (low + high) / 2


def _meets_slo(settings: SearchSettings) -> Callable[[LoadPointResult], bool]:
    def passes(result: LoadPointResult) -> bool:
        if result.goodput is None:
            raise InvalidInput(
                "an SLO search needs SLO targets, and the measured point has no goodput",
                hint="give at least one of --slo-ttft-ms, --slo-tpot-ms, --slo-e2el-ms",
            )
        return result.valid and result.goodput.attainment >= settings.required_attainment

    return passes


async def search_slo_load(measure: Measure, settings: SearchSettings) -> SearchOutcome:
    """The highest load meeting the SLOs (``None`` when even the lowest load tried misses them)."""
    search = _Search("slo", measure, settings)
    passes = _meets_slo(settings)
    outcome = search.outcome
    load = search.normalize(settings.start_load)
    first = await search.point(load, passes)
    low: float | None = None
    high: float | None = None
    if passes(first):
        low = load
        while search.budget_left():
            if load >= settings.max_load:
                outcome.found_load = load
                outcome.reason = (
                    f"met the SLOs up to max_load {settings.max_load:g}; raise --max-load to go on"
                )
                return outcome
            next_load = search.normalize(load * settings.growth_factor)
            if passes(await search.point(next_load, passes)):
                low = load = next_load
            else:
                high = next_load
                break
    else:
        high = load
        while search.budget_left():
            next_load = search.normalize(load / settings.growth_factor)
            if next_load == load or next_load < settings.min_load:
                outcome.reason = f"missed the SLOs even at load {load:g}"
                return outcome
            load = next_load
            if passes(await search.point(load, passes)):
                low = load
                break
            high = load
    if low is None or high is None:
        outcome.found_load = low
        outcome.reason = f"stopped after max_steps={settings.max_steps} before bracketing the SLO limit"
        return outcome
    while not search.narrow_enough(low, high) and search.budget_left():
        middle = search.normalize(search.middle(low, high))
        if middle in (low, high):
            break
        if passes(await search.point(middle, passes)):
            low = middle
        else:
            high = middle
    outcome.found_load = low
    outcome.reason = f"met the SLOs at {low:g}, missed them at {high:g}"
    return outcome


async def search_saturation_knee(measure: Measure, settings: SearchSettings) -> SearchOutcome:
    """The lowest load reaching ``saturation_fraction`` of the highest throughput measured."""
    search = _Search("knee", measure, settings)
    outcome = search.outcome
    throughputs: dict[float, float] = {}

    async def throughput_at(load: float) -> float:
        result = await search.point(load, lambda result: True)
        value = throughput_of(result)[0] if result.valid else 0.0
        throughputs[search.normalize(load)] = value
        return value

    load = search.normalize(settings.start_load)
    previous = await throughput_at(load)
    saturated = False
    while search.budget_left() and load < settings.max_load:
        next_load = search.normalize(load * settings.growth_factor)
        current = await throughput_at(next_load)
        load = next_load
        # More load bought less than the missing (1 - saturation_fraction) share: saturated.
        if previous > 0 and current <= previous / settings.saturation_fraction:
            saturated = True
            break
        previous = max(previous, current)
    peak = max(throughputs.values())
    if peak <= 0:
        outcome.reason = "no load point produced throughput (every point invalid)"
        return outcome
    target = settings.saturation_fraction * peak
    reaching = sorted(value for value, throughput in throughputs.items() if throughput >= target)
    high = reaching[0]
    below = [value for value in throughputs if value < high]
    low = max(below) if below else high
    while low < high and not search.narrow_enough(low, high) and search.budget_left():
        middle = search.normalize(search.middle(low, high))
        if middle in (low, high):
            break
        if await throughput_at(middle) >= target:
            high = middle
        else:
            low = middle
    for step in outcome.steps:
        object.__setattr__(step, "passed", throughputs.get(step.load, 0.0) >= target)
    outcome.found_load = high
    unit = outcome.steps[0].throughput_unit if outcome.steps else ""
    if saturated:
        share = f"{settings.saturation_fraction:.0%}"
        outcome.reason = f"throughput reaches {share} of its peak ({peak:.1f} {unit}) at load {high:g}"
    else:
        outcome.reason = (
            f"throughput was still growing at load {load:g} ({peak:.1f} {unit}): the knee is at or beyond it;"
            " raise --max-load"
        )
    return outcome


class RunnerMeasure:
    """``measure(load)`` with the benchmark runner: one point of ``config`` at that load.

    With ``fresh_prompts`` (the default) every measurement gets its own prompts (the dataset's
    seed moves on by one per measurement), so that an engine's prefix cache cannot serve a later
    load point the prompts of an earlier one: a search measures prefill at every step, not cache
    hits. Fixed sets (built-in, ShareGPT, a prompts file) are only reordered by the seed.
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        api_key: str | None = None,
        observer_factories: Sequence[Callable[[], Any]] = (),
        fresh_prompts: bool = True,
    ) -> None:
        self.config = config
        self.api_key = api_key
        self.observer_factories = tuple(observer_factories)
        self.fresh_prompts = fresh_prompts
        self.prompt_ids_by_load: dict[float, list[str]] = {}
        self._engine: str | None = None
        self._engine_detected = False
        self._prompt_sets: dict[int, tuple[list[BenchPrompt], list[bytes]]] = {}

    async def _prompts(self, seed: int) -> tuple[list[BenchPrompt], list[bytes]]:
        from modelyard.bench import runner

        if not self._engine_detected:
            self._engine = (await runner.detect_engine(self.config, self.api_key)).engine
            self._engine_detected = True
        if seed not in self._prompt_sets:
            config = dataclasses.replace(self.config, seed=seed)
            count = (config.num_requests or runner.DURATION_MODE_PROMPTS) + config.warmup_requests
            prompts = await asyncio.to_thread(runner.prepare_prompts, config, count, api_key=self.api_key)
            bodies = [runner.request_body(prompt, config, self._engine) for prompt in prompts]
            self._prompt_sets[seed] = (prompts, bodies)
        return self._prompt_sets[seed]

    async def __call__(self, load: float) -> LoadPointResult:
        from modelyard.bench import runner

        step = len(self.prompt_ids_by_load) if self.fresh_prompts else 0
        prompts, bodies = await self._prompts(self.config.seed + step)
        self.prompt_ids_by_load[load] = [prompt.prompt_id for prompt in prompts]
        observers = [factory() for factory in self.observer_factories]
        result, _records = await runner.run_point(
            self.config,
            LoadPoint(self.config.load_kind, load),
            bodies=bodies,
            prompts=prompts,
            api_key=self.api_key,
            observers=observers,
        )
        return result


def runner_measure(
    config: RunConfig,
    *,
    api_key: str | None = None,
    observer_factories: Sequence[Callable[[], Any]] = (),
    fresh_prompts: bool = True,
) -> RunnerMeasure:
    """The runner as a search's ``measure`` (see ``RunnerMeasure``)."""
    return RunnerMeasure(
        config, api_key=api_key, observer_factories=observer_factories, fresh_prompts=fresh_prompts
    )
