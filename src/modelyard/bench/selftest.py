"""``modelyard bench selftest``: how much of a measurement is the client itself, on this machine.

Starts the reference server in its own process with known timings, then:

1. latency overhead: one request at a time; measured TTFT, ITL and TPOT minus the configured ones;
2. capacity: open-loop rates (evenly spaced sends, so the rate asked is exact) doubling from
   ``start_rate_per_s`` until a point is invalid (the client fell behind its schedule), fails
   requests, or completes under 90 % of the rate asked for; the highest rate that held is the
   client's sustained rate here, as long as the server keeps up (it runs on this machine too, so
   on a small machine it can be the limit).

    result = run_selftest(SelftestConfig())
    print(result.ttft_overhead_ms, result.max_sustained_rate_per_s)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from modelyard.bench.records import LoadPointResult, RunConfig
from modelyard.bench.reference import ReferenceConfig, ReferenceServerProcess
from modelyard.bench.runner import run_benchmark

logger = logging.getLogger(__name__)

SELFTEST_MODEL = "selftest-model"


@dataclass(slots=True)
class SelftestConfig:
    ttft_ms: float = 20.0
    itl_ms: float = 5.0
    latency_requests: int = 30
    latency_output_tokens: int = 32
    capacity_output_tokens: int = 16
    capacity_seconds_per_rate: float = 3.0
    start_rate_per_s: float = 25.0
    max_rate_per_s: float = 6400.0
    max_send_lag_ms: float = 10.0
    input_tokens: int = 32


@dataclass(slots=True)
class CapacityStep:
    rate_per_s: float
    achieved_requests_per_s: float
    chunks_per_s: float
    p99_send_lag_ms: float | None
    held: bool
    reason: str | None


@dataclass(slots=True)
class SelftestResult:
    configured_ttft_ms: float
    configured_itl_ms: float
    measured_ttft_ms: float | None
    measured_itl_ms: float | None
    measured_tpot_ms: float | None
    ttft_overhead_ms: float | None
    itl_overhead_ms: float | None
    tpot_overhead_ms: float | None
    max_sustained_rate_per_s: float | None
    chunks_per_s_at_max: float | None
    steps: list[CapacityStep] = field(default_factory=list)
    stop_reason: str = ""


def _median(point: LoadPointResult, name: str) -> float | None:
    summary = point.metrics.get(name)
    return summary.median if summary is not None else None


def _difference(measured: float | None, configured: float) -> float | None:
    return None if measured is None else measured - configured


def _chunks_per_s(point: LoadPointResult) -> float:
    itl = point.metrics.get("itl_ms")
    chunks = (itl.count if itl is not None else 0) + point.requests_succeeded
    return chunks / point.measurement_duration_s if point.measurement_duration_s > 0 else 0.0


def run_selftest(config: SelftestConfig | None = None) -> SelftestResult:
    """Measure the client's latency overhead and sustained rate against the reference server."""
    config = config or SelftestConfig()
    server_config = ReferenceConfig(
        served_model_names=[SELFTEST_MODEL],
        model_path=SELFTEST_MODEL,
        ttft_ms=config.ttft_ms,
        itl_ms=config.itl_ms,
        max_concurrency=100_000,
        kv_cache_tokens=10**9,
    )
    with ReferenceServerProcess(server_config) as server:
        base = RunConfig(
            base_url=server.base_url,
            model=SELFTEST_MODEL,
            input_tokens=config.input_tokens,
            max_send_lag_ms=config.max_send_lag_ms,
            warmup_requests=3,
        )
        latency_config = replace(
            base,
            load_kind="concurrency",
            load_values=[1.0],
            num_requests=config.latency_requests,
            output_tokens=config.latency_output_tokens,
        )
        latency = run_benchmark(latency_config).result.points[0]
        ttft = _median(latency, "ttft_ms")
        itl = _median(latency, "itl_ms")
        tpot = _median(latency, "tpot_ms")
        result = SelftestResult(
            configured_ttft_ms=config.ttft_ms,
            configured_itl_ms=config.itl_ms,
            measured_ttft_ms=ttft,
            measured_itl_ms=itl,
            measured_tpot_ms=tpot,
            ttft_overhead_ms=_difference(ttft, config.ttft_ms),
            itl_overhead_ms=_difference(itl, config.itl_ms),
            tpot_overhead_ms=_difference(tpot, config.itl_ms),
            max_sustained_rate_per_s=None,
            chunks_per_s_at_max=None,
        )
        rate = config.start_rate_per_s
        while rate <= config.max_rate_per_s:
            capacity_config = replace(
                base,
                load_kind="rate",
                arrival="constant",
                load_values=[rate],
                num_requests=int(rate * config.capacity_seconds_per_rate),
                warmup_requests=max(3, int(rate * 0.3)),
                output_tokens=config.capacity_output_tokens,
            )
            point = run_benchmark(capacity_config).result.points[0]
            achieved = point.request_throughput_per_s
            reason = None
            if not point.valid:
                reason = point.invalid_reason
            elif point.requests_failed:
                reason = f"{point.requests_failed} requests failed: {', '.join(point.errors)}"
            elif achieved < 0.9 * rate * _steady_fraction(point):
                reason = (
                    f"completed {achieved:.0f} req/s of the {rate:g} asked for (client or server saturated)"
                )
            step = CapacityStep(
                rate_per_s=rate,
                achieved_requests_per_s=achieved,
                chunks_per_s=_chunks_per_s(point),
                p99_send_lag_ms=point.metrics["send_lag_ms"].p99,
                held=reason is None,
                reason=reason,
            )
            result.steps.append(step)
            logger.info("selftest %g req/s: %s", rate, "held" if step.held else reason)
            if not step.held:
                result.stop_reason = reason or ""
                break
            result.max_sustained_rate_per_s = rate
            result.chunks_per_s_at_max = step.chunks_per_s
            rate *= 2
        else:
            result.stop_reason = f"reached the highest rate tried ({config.max_rate_per_s:g} req/s)"
    return result


def _steady_fraction(point: LoadPointResult) -> float:
    """The window includes the last requests' latency, which lowers the apparent rate of short runs."""
    e2el = point.metrics.get("e2el_ms")
    if e2el is None or e2el.median is None or point.measurement_duration_s <= 0:
        return 1.0
    return max(0.0, 1.0 - e2el.median / 1000.0 / point.measurement_duration_s)
