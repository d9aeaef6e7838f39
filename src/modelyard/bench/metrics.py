"""From request records to the figures of a load point, with ``vllm bench serve``'s definitions.

- TTFT: send to the first chunk carrying a generated token (reasoning counts).
- TPOT: ``(E2EL - TTFT) / (n - 1)`` per request, ``n`` the completion tokens from ``usage``.
- ITL: the gap between consecutive generated chunks (so one gap per chunk, not per token).
- ITL per token: each gap divided by the tokens of the chunk that ended it, where per-chunk usage
  says how many (``continuous_usage_stats``); absent otherwise.
- E2EL: send to the end of the response.
- Time to first content token: send to the first chunk with answer content (after reasoning).
- Throughputs over the measurement window: from the first measured send to the last measured end.
- Goodput and SLO attainment over requests SENT: failed and timed-out requests count as misses;
  the attainment has a 95 % Wilson score interval.

Percentiles are numpy's linear ones and ``std`` is the population deviation, as vLLM reports them.
Token counts are never guessed: a request without ``usage`` has no TPOT, and token throughputs
are ``None`` when any successful request lacked it (``missing_usage_count`` says how many).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from modelyard.bench.records import (
    NANOSECONDS_PER_MILLISECOND,
    GoodputResult,
    LoadPoint,
    LoadPointResult,
    MetricSummary,
    PointSpread,
    RequestRecord,
    SloTargets,
    SpreadSummary,
)

RETOKENIZED_DIVERGENCE_LIMIT = 0.01
WILSON_Z_95 = 1.959963984540054


def summarize(values: Sequence[float]) -> MetricSummary:
    """Mean, median, p90/p95/p99, population std, min and max (all ``None`` when empty)."""
    if not values:
        return MetricSummary(count=0)
    array = np.asarray(values, dtype=float)
    p50, p90, p95, p99 = np.percentile(array, [50, 90, 95, 99]).tolist()
    return MetricSummary(
        count=len(values),
        mean=float(array.mean()),
        median=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        std=float(array.std()),
        min=float(array.min()),
        max=float(array.max()),
    )


def wilson_interval(successes: int, trials: int, z: float = WILSON_Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion; (0, 1) when there were no trials."""
    if trials == 0:
        return 0.0, 1.0
    proportion = successes / trials
    denominator = 1 + z * z / trials
    centre = (proportion + z * z / (2 * trials)) / denominator
    half_width = (
        z * math.sqrt(proportion * (1 - proportion) / trials + z * z / (4 * trials * trials)) / denominator
    )
    return max(0.0, centre - half_width), min(1.0, centre + half_width)


def tpot_ms(record: RequestRecord) -> float | None:
    """``(E2EL - TTFT) / (n - 1)``, or None without usage, with one token, or on failure."""
    tokens = record.usage_completion_tokens
    ttft = record.ttft_ms
    e2el = record.e2el_ms
    if not record.succeeded or tokens is None or tokens < 2 or ttft is None or e2el is None:
        return None
    return (e2el - ttft) / (tokens - 1)


def chunk_gaps_ms(record: RequestRecord) -> list[float]:
    arrivals = record.chunk_arrival_ns
    return [
        (later - earlier) / NANOSECONDS_PER_MILLISECOND for earlier, later in itertools.pairwise(arrivals)
    ]


def chunk_gaps_per_token_ms(record: RequestRecord) -> list[float]:
    gaps: list[float] = []
    arrivals = record.chunk_arrival_ns
    for index in range(1, len(arrivals)):
        tokens = record.chunk_tokens[index] if index < len(record.chunk_tokens) else None
        if tokens:
            gaps.append((arrivals[index] - arrivals[index - 1]) / NANOSECONDS_PER_MILLISECOND / tokens)
    return gaps


def meets_slo(record: RequestRecord, slo: SloTargets) -> bool:
    """A request meets the SLO when it succeeded and every given bound holds."""
    if not record.succeeded:
        return False
    checks = (
        (slo.ttft_ms, record.ttft_ms),
        (slo.e2el_ms, record.e2el_ms),
        (slo.time_to_first_content_ms, record.time_to_first_content_ms),
    )
    for bound, value in checks:
        if bound is not None and (value is None or value > bound):
            return False
    if slo.tpot_ms is not None:
        if record.usage_completion_tokens is None:
            return False
        value = tpot_ms(record)
        if value is not None and value > slo.tpot_ms:
            return False
    return True


def _error_key(error: str) -> str:
    return error.splitlines()[0][:160]


def summarize_point(
    point: LoadPoint,
    records: Sequence[RequestRecord],
    *,
    slo: SloTargets,
    max_send_lag_ms: float,
    started_at: datetime | None = None,
    min_requests_per_stream: float | None = None,
) -> LoadPointResult:
    """The figures of one load point from its records (warm-up records are counted, then left out).

    The point is invalid when no measured request succeeded, when the p99 send lag exceeds
    ``max_send_lag_ms`` (the client, not the server, set the pace), or, for a closed loop measured
    for a duration, when fewer than ``min_requests_per_stream`` requests per stream were measured:
    requests then outlive a good part of the window, and whether each stream fits one more in
    swings the count (512 or 768 at 256 streams, seen on an H200).
    """
    measured = [record for record in records if not record.warmup]
    succeeded = [record for record in measured if record.succeeded]
    failed = [record for record in measured if not record.succeeded]
    if measured:
        window_start_ns = min(record.actual_send_ns for record in measured)
        window_end_ns = max(record.end_ns or record.actual_send_ns for record in measured)
        window_s = max((window_end_ns - window_start_ns) / 1e9, 1e-9)
    else:
        window_s = 0.0
    missing_usage = [record for record in succeeded if record.usage_completion_tokens is None]
    output_tokens = [
        record.usage_completion_tokens for record in succeeded if record.usage_completion_tokens is not None
    ]
    input_tokens = [
        record.usage_prompt_tokens for record in succeeded if record.usage_prompt_tokens is not None
    ]

    def per_s(count: float) -> float:
        return count / window_s if window_s > 0 else 0.0

    output_rate = per_s(sum(output_tokens)) if succeeded and not missing_usage else None
    input_rate = per_s(sum(input_tokens)) if succeeded and len(input_tokens) == len(succeeded) else None
    total_rate = output_rate + input_rate if output_rate is not None and input_rate is not None else None

    tpots = [value for value in (tpot_ms(record) for record in succeeded) if value is not None]
    metrics = {
        "ttft_ms": summarize([r.ttft_ms for r in succeeded if r.ttft_ms is not None]),
        "tpot_ms": summarize(tpots),
        "itl_ms": summarize([gap for record in succeeded for gap in chunk_gaps_ms(record)]),
        "itl_per_token_ms": summarize(
            [gap for record in succeeded for gap in chunk_gaps_per_token_ms(record)]
        ),
        "e2el_ms": summarize([r.e2el_ms for r in succeeded if r.e2el_ms is not None]),
        "time_to_first_content_ms": summarize(
            [r.time_to_first_content_ms for r in succeeded if r.time_to_first_content_ms is not None]
        ),
        "send_lag_ms": summarize([record.send_lag_ms for record in measured]),
        "output_tokens_per_s_per_user": summarize([1000.0 / value for value in tpots if value > 0]),
        "input_tokens": summarize([float(value) for value in input_tokens]),
        "output_tokens": summarize([float(value) for value in output_tokens]),
    }
    goodput = None
    if not slo.is_empty():
        met = sum(1 for record in measured if meets_slo(record, slo))
        low, high = wilson_interval(met, len(measured))
        goodput = GoodputResult(
            slo=slo,
            requests_sent=len(measured),
            requests_met=met,
            attainment=met / len(measured) if measured else 0.0,
            attainment_ci_low=low,
            attainment_ci_high=high,
            goodput_requests_per_s=per_s(met),
        )
    divergences = [
        abs(record.retokenized_completion_tokens - record.usage_completion_tokens)
        / record.usage_completion_tokens
        for record in succeeded
        if record.retokenized_completion_tokens is not None and record.usage_completion_tokens
    ]
    valid, reason = _validity(point, measured, succeeded, metrics["send_lag_ms"], max_send_lag_ms)
    if valid and min_requests_per_stream and point.kind == "concurrency" and point.value > 0:
        per_stream = len(measured) / point.value
        if per_stream < min_requests_per_stream:
            valid, reason = (
                False,
                (
                    f"only {per_stream:.1f} requests per stream were measured at concurrency {point.value:g} "
                    f"(at least {min_requests_per_stream:g} are needed for a stable rate): lengthen "
                    "--duration-s, or give --num-requests"
                ),
            )
    return LoadPointResult(
        point=point,
        started_at=(started_at or datetime.now(UTC)).isoformat(),
        measurement_duration_s=window_s,
        requests_sent=len(measured),
        requests_succeeded=len(succeeded),
        requests_failed=len(failed),
        warmup_requests=len(records) - len(measured),
        missing_usage_count=len(missing_usage),
        request_throughput_per_s=per_s(len(succeeded)),
        output_token_throughput_per_s=output_rate,
        total_token_throughput_per_s=total_rate,
        input_token_throughput_per_s=input_rate,
        metrics=metrics,
        goodput=goodput,
        retokenized_divergent_count=sum(1 for value in divergences if value > RETOKENIZED_DIVERGENCE_LIMIT),
        max_retokenized_divergence=max(divergences) if divergences else None,
        errors=dict(Counter(_error_key(record.error) for record in failed if record.error)),
        valid=valid,
        invalid_reason=reason,
    )


def _validity(
    point: LoadPoint,
    measured: Sequence[RequestRecord],
    succeeded: Sequence[RequestRecord],
    send_lag: MetricSummary,
    max_send_lag_ms: float,
) -> tuple[bool, str | None]:
    if not measured:
        return False, "no request was measured (all were warm-up, or none was sent)"
    if not succeeded:
        return False, f"all {len(measured)} measured requests failed"
    if point.kind == "rate" and send_lag.p99 is not None and send_lag.p99 > max_send_lag_ms:
        return False, (
            f"the client fell behind its schedule: p99 send lag {send_lag.p99:.1f} ms > "
            f"{max_send_lag_ms:g} ms at {point.value:g} req/s; lower the rate, or run the client on a less "
            "loaded machine (modelyard bench selftest shows what this one sustains)"
        )
    if point.kind == "concurrency" and send_lag.p99 is not None and send_lag.p99 > max_send_lag_ms:
        return False, (
            f"the client was slow to reuse free slots: p99 send lag {send_lag.p99:.1f} ms > "
            f"{max_send_lag_ms:g} ms at concurrency {point.value:g}; the client, not the server, "
            "limited this point"
        )
    return True, None


def spread_of_repeats(points: Sequence[LoadPointResult]) -> list[PointSpread]:
    """How the headline figures varied across repetitions of each load level."""
    groups: dict[tuple[str, float], list[LoadPointResult]] = {}
    for result in points:
        groups.setdefault((result.point.kind, result.point.value), []).append(result)
    spreads = []
    for (_kind, value), results in groups.items():
        figures: dict[str, SpreadSummary] = {}
        candidates: dict[str, list[float | None]] = {
            "request_throughput_per_s": [r.request_throughput_per_s for r in results],
            "output_token_throughput_per_s": [r.output_token_throughput_per_s for r in results],
            "median_ttft_ms": [r.metrics["ttft_ms"].median for r in results],
            "median_tpot_ms": [r.metrics["tpot_ms"].median for r in results],
            "median_itl_ms": [r.metrics["itl_ms"].median for r in results],
            "median_e2el_ms": [r.metrics["e2el_ms"].median for r in results],
        }
        for name, raw in candidates.items():
            values = [value for value in raw if value is not None]
            if values:
                array = np.asarray(values, dtype=float)
                figures[name] = SpreadSummary(
                    mean=float(array.mean()),
                    std=float(array.std()),
                    min=float(array.min()),
                    max=float(array.max()),
                    values=values,
                )
        spreads.append(
            PointSpread(kind=results[0].point.kind, value=value, repeats=len(results), figures=figures)
        )
    return spreads
