"""Service-level objectives of a tune: ``ttft_p95<=500ms,tpot_p50<=40ms``.

Each term bounds one statistic of one per-request metric of a load point, as the bench reports it
(``LoadPointResult.metrics``). A load point meets an SLO when every term holds there.

    slos = parse_slos("ttft_p99<=2s,tpot_p50<=40ms")
    slos[0].metric, slos[0].statistic, slos[0].limit_ms   # ("ttft", "p99", 2000.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from modelyard.errors import InvalidInput

# External API: the names a user writes in --slo (docs/tune.md).
SloMetric = Literal["ttft", "tpot", "itl", "e2el"]
SloStatistic = Literal["p50", "p90", "p95", "p99", "mean", "max"]

_BENCH_METRIC: dict[str, str] = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2el_ms"}
_BENCH_STATISTIC: dict[str, str] = {
    "p50": "median",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "mean": "mean",
    "max": "max",
}
_UNIT_MS = {"ms": 1.0, "s": 1000.0}
_TERM = re.compile(
    r"^(?P<metric>[a-z0-9]+)_(?P<statistic>[a-z0-9]+)<=(?P<number>[0-9]*\.?[0-9]+)(?P<unit>ms|s)$"
)
EXAMPLE = "ttft_p95<=500ms,tpot_p50<=40ms"


@dataclass(frozen=True)
class Slo:
    """One bound: ``statistic`` of ``metric`` at most ``limit_ms`` milliseconds."""

    metric: SloMetric
    statistic: SloStatistic
    limit_ms: float

    @property
    def text(self) -> str:
        return f"{self.metric}_{self.statistic}<={self.limit_ms:g}ms"

    @property
    def bench_metric(self) -> str:
        """The key of ``LoadPointResult.metrics`` it reads (``ttft_ms``)."""
        return _BENCH_METRIC[self.metric]

    @property
    def bench_statistic(self) -> str:
        """The field of ``MetricSummary`` it reads (``median`` for p50)."""
        return _BENCH_STATISTIC[self.statistic]


def parse_slos(text: str) -> list[Slo]:
    """Comma-separated terms ``METRIC_STATISTIC<=NUMBER(ms|s)``; raises ``InvalidInput`` naming the
    bad term and what is allowed."""
    terms = [part.strip().replace(" ", "") for part in text.split(",") if part.strip()]
    if not terms:
        raise InvalidInput("--slo is empty", hint=f"--slo '{EXAMPLE}'")
    slos: list[Slo] = []
    for term in terms:
        match = _TERM.match(term.lower())
        if match is None:
            raise InvalidInput(
                f"--slo term {term!r} is not METRIC_STATISTIC<=NUMBER with a unit (ms or s)",
                hint=f"--slo '{EXAMPLE}' (metrics {', '.join(get_args(SloMetric))}; "
                f"statistics {', '.join(get_args(SloStatistic))})",
            )
        metric, statistic = match["metric"], match["statistic"]
        if metric not in get_args(SloMetric):
            raise InvalidInput(
                f"--slo term {term!r}: unknown metric {metric!r}",
                hint=f"use one of {', '.join(get_args(SloMetric))}",
            )
        if statistic not in get_args(SloStatistic):
            raise InvalidInput(
                f"--slo term {term!r}: unknown statistic {statistic!r}",
                hint=f"use one of {', '.join(get_args(SloStatistic))}",
            )
        limit_ms = float(match["number"]) * _UNIT_MS[match["unit"]]
        if limit_ms <= 0:
            raise InvalidInput(f"--slo term {term!r}: the limit must be above 0")
        slos.append(Slo(metric=metric, statistic=statistic, limit_ms=limit_ms))  # type: ignore[arg-type]
    return slos


def format_slos(slos: list[Slo]) -> str:
    return ",".join(slo.text for slo in slos)
