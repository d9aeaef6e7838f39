"""One measurement: the bench (``modelyard.bench.runner.run_benchmark``) against a started
candidate, at every load of the workload, replaying the tune's prompts file; its record written
as ``modelyard bench run --out`` writes it (``result.json``, ``requests.jsonl``, ``points.csv``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from modelyard.bench.outputs import write_outputs
from modelyard.bench.records import EngineInfo, RunConfig
from modelyard.bench.runner import run_benchmark
from modelyard.tune.contract import Endpoint
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

    def measure(
        self, candidate: Candidate, endpoint: Endpoint, rung: int, requests_per_point: int, record_dir: Path
    ) -> Measurement:
        began_s = self.clock()
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
        write_outputs(outcome, record_dir)
        return Measurement(
            candidate_id=candidate.candidate_id,
            rung=rung,
            requests_per_point=requests_per_point,
            points=tuple(PointFigures.from_result(point) for point in outcome.result.points),
            record_dir=str(record_dir),
            duration_s=self.clock() - began_s,
        )
