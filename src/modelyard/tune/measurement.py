"""What a tune keeps of one benchmark run of one candidate: the figures of each load point, and
how they compare to the SLOs. The bench's own record (``result.json``, ``requests.jsonl``,
``points.csv``, as ``modelyard bench run --out`` writes them) sits in ``record_dir``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from modelyard.bench.records import LoadPointResult
from modelyard.tune.acceptance import AcceptanceFigures
from modelyard.tune.slo import Slo

_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
_STATISTICS = ("median", "p90", "p95", "p99", "mean", "max")


@dataclass(frozen=True)
class PointFigures:
    """One load point of a measurement: its throughput and latency statistics (ms)."""

    load: float
    valid: bool
    requests_succeeded: int
    requests_failed: int
    request_throughput_per_s: float
    output_token_throughput_per_s: float | None
    # metric (ttft_ms ...) -> statistic (median, p95 ...) -> value in ms
    latency_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @classmethod
    def from_result(cls, result: LoadPointResult) -> PointFigures:
        latency: dict[str, dict[str, float | None]] = {}
        for metric in _METRICS:
            summary = result.metrics.get(metric)
            if summary is not None:
                latency[metric] = {name: getattr(summary, name) for name in _STATISTICS}
        return cls(
            load=result.point.value,
            valid=result.valid,
            requests_succeeded=result.requests_succeeded,
            requests_failed=result.requests_failed,
            request_throughput_per_s=result.request_throughput_per_s,
            output_token_throughput_per_s=result.output_token_throughput_per_s,
            latency_ms=latency,
        )

    @property
    def throughput(self) -> float:
        """Output tokens/s when known, else requests/s (the bench's ``throughput_of`` rule)."""
        if self.output_token_throughput_per_s is not None:
            return self.output_token_throughput_per_s
        return self.request_throughput_per_s

    def value_of(self, slo: Slo) -> float | None:
        return self.latency_ms.get(slo.bench_metric, {}).get(slo.bench_statistic)

    def meets(self, slos: list[Slo]) -> bool:
        if not self.valid or self.requests_succeeded == 0 or self.requests_failed > 0:
            return False
        for slo in slos:
            value = self.value_of(slo)
            if value is None or value > slo.limit_ms:
                return False
        return True


@dataclass(frozen=True)
class Measurement:
    """One bench run of one candidate at one rung of the search."""

    candidate_id: str
    rung: int
    requests_per_point: int
    points: tuple[PointFigures, ...]
    record_dir: str
    duration_s: float
    speculation: AcceptanceFigures | None = None
    """The speculative acceptance during the run, when the candidate speculates and its engine
    says (``acceptance.py``)."""

    def best_point(self, slos: list[Slo]) -> PointFigures | None:
        """The highest-throughput load point that meets every SLO, or None."""
        meeting = [point for point in self.points if point.meets(slos)]
        return max(meeting, key=lambda point: point.throughput) if meeting else None

    def score(self, slos: list[Slo]) -> tuple[int, float]:
        """For ranking, higher is better: (meets the SLOs at some load, throughput there; else the
        highest valid throughput measured, ranked below every candidate that meets them)."""
        best = self.best_point(slos)
        if best is not None:
            return (1, best.throughput)
        valid = [point.throughput for point in self.points if point.valid and point.requests_succeeded]
        return (0, max(valid, default=0.0))

    def to_json(self) -> dict[str, Any]:
        data = {"kind": "measurement", **asdict(self), "points": [asdict(point) for point in self.points]}
        if self.speculation is None:
            del data["speculation"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            candidate_id=data["candidate_id"],
            rung=int(data["rung"]),
            requests_per_point=int(data["requests_per_point"]),
            points=tuple(PointFigures(**point) for point in data["points"]),
            record_dir=data["record_dir"],
            duration_s=float(data["duration_s"]),
            speculation=AcceptanceFigures.from_json(data["speculation"]) if data.get("speculation") else None,
        )
