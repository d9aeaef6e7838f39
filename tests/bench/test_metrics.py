"""Metric definitions on hand-made records (times in ns since the run began)."""

from __future__ import annotations

import pytest

from modelyard.bench.metrics import (
    chunk_gaps_per_token_ms,
    meets_slo,
    summarize,
    summarize_point,
    tpot_ms,
    wilson_interval,
)
from modelyard.bench.records import LoadPoint, RequestRecord, RunResult, SloTargets

MS = 1_000_000


def _record(
    index: int, *, send_ms: float = 0, chunks_ms: list[float], tokens: int | None, **fields: object
) -> RequestRecord:
    record = RequestRecord(
        request_index=index,
        prompt_id=f"p{index}",
        scheduled_send_ns=int(send_ms * MS),
        actual_send_ns=int(send_ms * MS),
        chunk_arrival_ns=[int(value * MS) for value in chunks_ms],
        chunk_tokens=[None] * len(chunks_ms),
        first_chunk_ns=int(chunks_ms[0] * MS) if chunks_ms else None,
        first_content_ns=int(chunks_ms[0] * MS) if chunks_ms else None,
        end_ns=int((chunks_ms[-1] if chunks_ms else send_ms) * MS),
        usage_completion_tokens=tokens,
        usage_prompt_tokens=10 if tokens is not None else None,
    )
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def test_tpot_is_decode_time_over_tokens_after_the_first() -> None:
    record = _record(0, chunks_ms=[100, 120, 140, 160], tokens=7)
    # (E2EL 160 - TTFT 100) / (7 - 1)
    assert tpot_ms(record) == pytest.approx(10.0)
    assert tpot_ms(_record(1, chunks_ms=[100], tokens=1)) is None
    assert tpot_ms(_record(2, chunks_ms=[100, 110], tokens=None)) is None


def test_itl_per_token_divides_each_gap_by_the_chunk_tokens() -> None:
    record = _record(0, chunks_ms=[100, 120, 150], tokens=5, chunk_tokens=[1, 2, None])
    assert chunk_gaps_per_token_ms(record) == pytest.approx([10.0])


def test_point_summary_excludes_warmup_and_reports_missing_usage() -> None:
    records = [
        _record(0, chunks_ms=[50, 60], tokens=2, warmup=True),
        _record(1, send_ms=100, chunks_ms=[150, 160, 170], tokens=3),
        _record(2, send_ms=100, chunks_ms=[140, 150], tokens=None),
        _record(3, send_ms=110, chunks_ms=[], tokens=None, error="HTTP 500: boom"),
    ]
    point = summarize_point(LoadPoint("concurrency", 2), records, slo=SloTargets(), max_send_lag_ms=10)
    assert (point.requests_sent, point.requests_succeeded, point.requests_failed) == (3, 2, 1)
    assert point.warmup_requests == 1
    assert point.missing_usage_count == 1
    assert point.output_token_throughput_per_s is None
    assert point.errors == {"HTTP 500: boom": 1}
    assert point.metrics["ttft_ms"].median == pytest.approx(45.0)
    # Window: first measured send (100 ms) to last end (170 ms): 2 successes in 0.07 s.
    assert point.request_throughput_per_s == pytest.approx(2 / 0.07)


def test_goodput_counts_requests_sent_and_has_a_wilson_interval() -> None:
    records = [_record(i, chunks_ms=[20 if i < 6 else 80, 90], tokens=2) for i in range(8)]
    records.append(_record(8, chunks_ms=[], tokens=None, error="timeout"))
    point = summarize_point(LoadPoint("rate", 5), records, slo=SloTargets(ttft_ms=50), max_send_lag_ms=10)
    assert point.goodput is not None
    assert (point.goodput.requests_sent, point.goodput.requests_met) == (9, 6)
    assert point.goodput.attainment == pytest.approx(6 / 9)
    assert point.goodput.attainment_ci_low < 6 / 9 < point.goodput.attainment_ci_high


def test_wilson_interval_matches_the_textbook_value() -> None:
    low, high = wilson_interval(8, 10)
    assert (low, high) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_tpot_slo_is_missed_without_usage() -> None:
    record = _record(0, chunks_ms=[10, 20], tokens=None)
    assert not meets_slo(record, SloTargets(tpot_ms=100))
    assert meets_slo(record, SloTargets(ttft_ms=100))


def test_a_point_whose_sends_lagged_is_invalid_with_the_reason() -> None:
    records = [_record(i, send_ms=i * 10, chunks_ms=[i * 10 + 30], tokens=1) for i in range(5)]
    for record in records:
        record.actual_send_ns += 25 * MS
    point = summarize_point(LoadPoint("rate", 100), records, slo=SloTargets(), max_send_lag_ms=10)
    assert not point.valid
    assert point.invalid_reason is not None and "fell behind its schedule" in point.invalid_reason


def test_retokenized_counts_diverging_by_more_than_one_percent_are_flagged() -> None:
    records = [
        _record(0, chunks_ms=[10, 20], tokens=100, retokenized_completion_tokens=100),
        _record(1, chunks_ms=[10, 20], tokens=100, retokenized_completion_tokens=103),
    ]
    point = summarize_point(LoadPoint("concurrency", 1), records, slo=SloTargets(), max_send_lag_ms=10)
    assert point.retokenized_divergent_count == 1
    assert point.max_retokenized_divergence == pytest.approx(0.03)


def test_summary_statistics_are_numpy_percentiles_and_population_std() -> None:
    summary = summarize([1.0, 2.0, 3.0, 4.0])
    assert (summary.mean, summary.median, summary.std) == pytest.approx((2.5, 2.5, 1.118034))
    assert summary.p99 == pytest.approx(3.97)
    assert summarize([]).count == 0


def test_result_round_trips_through_json_and_refuses_other_versions() -> None:
    from modelyard.bench.records import EngineInfo, HardwareInfo, RunConfig
    from modelyard.errors import InvalidInput

    point = summarize_point(
        LoadPoint("rate", 2),
        [_record(0, chunks_ms=[10, 20], tokens=2)],
        slo=SloTargets(ttft_ms=5),
        max_send_lag_ms=10,
    )
    result = RunResult(
        config=RunConfig(base_url="http://x", model="m"),
        engine=EngineInfo(base_url="http://x", served_model="m"),
        hardware=HardwareInfo("host", "linux", 2, "3.11", "0.1.0"),
        run_id="r1",
        created_at="2026-11-30T00:00:00+00:00",
        points=[point],
    )
    assert RunResult.from_json(result.to_json()) == result
    with pytest.raises(InvalidInput, match="schema_version 99"):
        RunResult.from_json(result.to_json().replace('"schema_version": 1', '"schema_version": 99'))


def test_a_duration_point_with_too_few_requests_per_stream_is_invalid() -> None:
    # 4 streams, 8 measured requests: each stream finished 2, so one more or one fewer per stream
    # would move the rate by a third or more.
    records = [
        _record(index, send_ms=index * 10, chunks_ms=[index * 10 + 50], tokens=1) for index in range(8)
    ]
    short = summarize_point(
        LoadPoint("concurrency", 4), records, slo=SloTargets(), max_send_lag_ms=10, min_requests_per_stream=3
    )
    assert not short.valid
    assert short.invalid_reason is not None
    assert "2.0 requests per stream" in short.invalid_reason and "--duration-s" in short.invalid_reason
    enough = summarize_point(
        LoadPoint("concurrency", 2), records, slo=SloTargets(), max_send_lag_ms=10, min_requests_per_stream=3
    )
    assert enough.valid, enough.invalid_reason
    # A fixed number of requests is the user's choice of work: no such rule.
    fixed = summarize_point(LoadPoint("concurrency", 4), records, slo=SloTargets(), max_send_lag_ms=10)
    assert fixed.valid
