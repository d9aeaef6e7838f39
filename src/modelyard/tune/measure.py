"""One measurement: the bench (``modelyard.bench.runner.run_benchmark``) against a started
candidate, at every load of the workload, replaying the tune's prompts file; its record written
as ``modelyard bench run --out`` writes it (``result.json``, ``requests.jsonl``, ``points.csv``).

With ``knee_search``, the final rung runs the bench's saturation-knee search instead
(``modelyard.bench.search.search_saturation_knee``, from the workload's lowest load up to
``knee_max_load_factor`` times its highest), so the winner's load is found rather than picked from
the workload's few; its record is what ``modelyard bench search --out`` writes (``search.json``,
``result.json``). The SLOs then pick the best of every load the search measured.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from modelyard.bench import runner
from modelyard.bench.outputs import write_outputs
from modelyard.bench.records import EngineInfo, LoadPointResult, RunConfig, RunResult
from modelyard.bench.runner import MIN_REQUESTS_PER_STREAM, run_benchmark
from modelyard.bench.search import SearchSettings, runner_measure, search_saturation_knee
from modelyard.tune.acceptance import acceptance_between, read_counters
from modelyard.tune.endpoint import Endpoint
from modelyard.tune.measurement import Measurement, PointFigures
from modelyard.tune.space import Candidate
from modelyard.tune.workloads import Workload


@dataclass
class BenchMeasurer:
    """Runs the bench for the tuner. ``clock`` gives seconds (a test may pass its own)."""

    workload: Workload
    prompts_file: Path
    warmup_requests: int = 0
    request_timeout_s: float = 600.0
    knee_search: bool = False
    knee_max_load_factor: float = 4.0
    knee_max_steps: int = 8
    clock: Callable[[], float] = field(default=time.monotonic)

    def config(self, endpoint: Endpoint, requests_per_point: int) -> RunConfig:
        rate = self.workload.load_kind == "rate"
        return RunConfig(
            base_url=endpoint.base_url,
            model=endpoint.model,
            endpoint="chat",
            load_kind=self.workload.load_kind,
            load_values=list(self.workload.loads),
            arrival="gamma" if rate and self.workload.burstiness != 1.0 else "poisson",
            burstiness=self.workload.burstiness,
            num_requests=requests_per_point,
            warmup_requests=self.warmup_requests,
            input_tokens=self.workload.input_tokens,
            output_tokens=self.workload.output_tokens,
            prompts_file=str(self.prompts_file),
            request_timeout_s=self.request_timeout_s,
            ignore_eos=True,
        )

    def knee_requests(self, requests_per_point: int) -> int:
        """Requests per point of a knee search: at least 3 per stream at its highest load, so that
        every point it measures runs the engine full (the bench's rule for closed loops)."""
        highest = max(self.workload.loads) * self.knee_max_load_factor
        return max(requests_per_point, math.ceil(MIN_REQUESTS_PER_STREAM * highest))

    def _knee_points(
        self, candidate: Candidate, endpoint: Endpoint, requests_per_point: int, record_dir: Path
    ) -> list[LoadPointResult]:
        config = self.config(endpoint, requests_per_point)
        config.load_values = [min(self.workload.loads)]
        settings = SearchSettings(
            load_kind=self.workload.load_kind,
            start_load=min(self.workload.loads),
            max_load=max(self.workload.loads) * self.knee_max_load_factor,
            max_steps=self.knee_max_steps,
        )
        measure = runner_measure(config, api_key=endpoint.api_key)

        async def search() -> tuple[list[LoadPointResult], str, str]:
            engine = await runner.detect_engine(config, endpoint.api_key)
            engine.label = candidate.label
            outcome = await search_saturation_knee(measure, settings)
            points = outcome.ordered_results()
            result = RunResult(
                config=config,
                engine=engine,
                hardware=runner.client_hardware(endpoint.base_url),
                run_id=uuid.uuid4().hex[:12],
                created_at=datetime.now(UTC).isoformat(),
                points=points,
            )
            return points, json.dumps(outcome.to_json(), indent=2), result.to_json()

        points, search_json, result_json = asyncio.run(search())
        record_dir.mkdir(parents=True, exist_ok=True)
        (record_dir / "search.json").write_text(search_json, encoding="utf-8")
        (record_dir / "result.json").write_text(result_json, encoding="utf-8")
        return points

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
        began_s = self.clock()
        # The engine's speculation counters around the run (only for a candidate that speculates).
        before = read_counters(endpoint) if candidate.speculation is not None else None
        if final and self.knee_search:
            requests_per_point = self.knee_requests(requests_per_point)
            points = self._knee_points(candidate, endpoint, requests_per_point, record_dir)
            speculation = (
                acceptance_between(before, read_counters(endpoint)) if candidate.speculation else None
            )
            return Measurement(
                candidate_id=candidate.candidate_id,
                rung=rung,
                requests_per_point=requests_per_point,
                points=tuple(PointFigures.from_result(point) for point in points),
                record_dir=str(record_dir),
                duration_s=self.clock() - began_s,
                speculation=speculation,
            )
        outcome = run_benchmark(
            self.config(endpoint, requests_per_point),
            api_key=endpoint.api_key,
            engine=EngineInfo(
                base_url=endpoint.base_url,
                served_model=endpoint.model,
                engine=candidate.engine.family,
                label=candidate.label,
            ),
        )
        speculation = acceptance_between(before, read_counters(endpoint)) if candidate.speculation else None
        write_outputs(outcome, record_dir)
        return Measurement(
            candidate_id=candidate.candidate_id,
            rung=rung,
            requests_per_point=requests_per_point,
            points=tuple(PointFigures.from_result(point) for point in outcome.result.points),
            record_dir=str(record_dir),
            duration_s=self.clock() - began_s,
            speculation=speculation,
        )
