"""The client measures what the reference server is known to do.

Tolerances: a measured latency may not be below the configured one by more than 1 ms (timer
granularity) and may exceed it by at most 30 ms for TTFT and E2E and 5 ms per token gap; these
bound the client's and the loopback's own overhead on a loaded CI machine, not its speed (speed
targets live in benchmarks/).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from modelyard.bench.records import LoadPointResult, RunConfig
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.runner import BenchmarkOutcome, run_benchmark

MODEL = "timed-model"
TTFT_MS = 40.0
ITL_MS = 8.0
OUTPUT_TOKENS = 9
FIRST_TOKEN_SLACK_MS = 30.0
GAP_SLACK_MS = 5.0


def _run(server: ReferenceServer, **changes: object) -> BenchmarkOutcome:
    config = RunConfig(
        base_url=server.base_url,
        model=MODEL,
        load_kind="concurrency",
        load_values=[1],
        num_requests=8,
        warmup_requests=1,
        input_tokens=12,
        output_tokens=OUTPUT_TOKENS,
        max_send_lag_ms=1000,
    )
    for name, value in changes.items():
        setattr(config, name, value)
    return run_benchmark(config)


def _server(**changes: object) -> ReferenceServer:
    config = ReferenceConfig(served_model_names=[MODEL], model_path=MODEL, ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    return ReferenceServer(config.replace(**changes))


def _median(point: LoadPointResult, name: str) -> float:
    value = point.metrics[name].median
    assert value is not None, f"{name} was not measured"
    return value


def _assert_near(measured: float, expected: float, slack_ms: float) -> None:
    assert expected - 1.0 <= measured <= expected + slack_ms, (
        f"measured {measured:.2f} ms, expected {expected} ms"
    )


@pytest.fixture(scope="module")
def one_token_chunks() -> Iterator[ReferenceServer]:
    with _server() as server:
        yield server


def test_ttft_tpot_itl_and_e2el_match_the_configured_timings(one_token_chunks: ReferenceServer) -> None:
    point = _run(one_token_chunks).result.points[0]
    assert point.requests_succeeded == 8
    assert point.valid
    _assert_near(_median(point, "ttft_ms"), TTFT_MS, FIRST_TOKEN_SLACK_MS)
    _assert_near(_median(point, "tpot_ms"), ITL_MS, GAP_SLACK_MS)
    _assert_near(_median(point, "itl_ms"), ITL_MS, GAP_SLACK_MS)
    _assert_near(_median(point, "itl_per_token_ms"), ITL_MS, GAP_SLACK_MS)
    _assert_near(_median(point, "e2el_ms"), TTFT_MS + (OUTPUT_TOKENS - 1) * ITL_MS, FIRST_TOKEN_SLACK_MS)
    assert point.metrics["itl_ms"].count == 8 * (OUTPUT_TOKENS - 1)


def test_token_counts_and_throughput_come_from_usage(one_token_chunks: ReferenceServer) -> None:
    outcome = _run(one_token_chunks, load_values=[4], num_requests=16)
    point = outcome.result.points[0]
    measured = [record for record in outcome.records[0] if not record.warmup]
    assert {record.usage_completion_tokens for record in measured} == {OUTPUT_TOKENS}
    assert {record.usage_prompt_tokens for record in measured} == {12}
    assert point.output_token_throughput_per_s == pytest.approx(
        16 * OUTPUT_TOKENS / point.measurement_duration_s
    )
    # Four requests at a time, each lasting about one E2E: the rate is close to 4 / E2E.
    e2el_s = _median(point, "e2el_ms") / 1000
    assert 0.6 * 4 / e2el_s <= point.request_throughput_per_s <= 4 / e2el_s * 1.05


def test_several_tokens_per_chunk_give_chunk_gaps_and_per_token_gaps() -> None:
    with _server(tokens_per_chunk=4) as server:
        outcome = _run(server)
    point = outcome.result.points[0]
    record = outcome.records[0][-1]
    assert record.chunk_tokens == [1, 4, 4]
    _assert_near(_median(point, "itl_ms"), 4 * ITL_MS, GAP_SLACK_MS)
    _assert_near(_median(point, "itl_per_token_ms"), ITL_MS, GAP_SLACK_MS)
    _assert_near(_median(point, "tpot_ms"), ITL_MS, GAP_SLACK_MS)


def test_reasoning_first_streams_count_ttft_at_the_first_reasoning_token() -> None:
    reasoning_tokens = 5
    with _server(reasoning_tokens=reasoning_tokens) as server:
        outcome = _run(server)
    point = outcome.result.points[0]
    _assert_near(_median(point, "ttft_ms"), TTFT_MS, FIRST_TOKEN_SLACK_MS)
    _assert_near(
        _median(point, "time_to_first_content_ms"), TTFT_MS + reasoning_tokens * ITL_MS, FIRST_TOKEN_SLACK_MS
    )
    record = outcome.records[0][-1]
    assert record.reasoning_chunk_count == reasoning_tokens
    assert record.reasoning_chars > 0 and record.output_chars > 0


def test_sglang_reasoning_content_is_recognised_too() -> None:
    with _server(flavor="sglang", reasoning_tokens=3) as server:
        record = _run(server, num_requests=2).records[0][-1]
    assert record.reasoning_chunk_count == 3
    assert record.first_content_ns is not None and record.first_chunk_ns is not None
    assert record.first_content_ns > record.first_chunk_ns


def test_warmup_requests_are_recorded_but_left_out(one_token_chunks: ReferenceServer) -> None:
    outcome = _run(one_token_chunks, warmup_requests=3, num_requests=4)
    assert [record.warmup for record in outcome.records[0]] == [True] * 3 + [False] * 4
    point = outcome.result.points[0]
    assert (point.requests_sent, point.warmup_requests) == (4, 3)


def test_open_loop_sends_on_schedule(one_token_chunks: ReferenceServer) -> None:
    outcome = _run(one_token_chunks, load_kind="rate", load_values=[50], num_requests=20, max_send_lag_ms=50)
    point = outcome.result.points[0]
    assert point.valid, point.invalid_reason
    lags = [record.send_lag_ms for record in outcome.records[0]]
    assert max(lags) < 50
    # Requests overlap in an open loop at 50 req/s with ~100 ms requests.
    records = outcome.records[0]
    overlapping = sum(1 for a, b in itertools.pairwise(records) if b.actual_send_ns < (a.end_ns or 0))
    assert overlapping > 0


def test_sweeps_with_repeats_report_the_spread(one_token_chunks: ReferenceServer) -> None:
    result = _run(one_token_chunks, load_values=[1, 2], repeats=2, num_requests=3).result
    assert [(p.point.value, p.point.repeat_index) for p in result.points] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert [(spread.value, spread.repeats) for spread in result.spreads] == [(1, 2), (2, 2)]
    assert len(result.spreads[0].figures["median_ttft_ms"].values) == 2


class _WordCounter:
    """Counts tokens the way the reference server does (one per word): a stand-in local tokenizer."""

    def __init__(self, extra_tokens: int = 0) -> None:
        self.extra_tokens = extra_tokens

    def count_plain(self, text: str) -> int:
        return len(text.split()) + self.extra_tokens


def test_retokenized_counts_are_compared_with_usage(one_token_chunks: ReferenceServer) -> None:
    config = RunConfig(
        base_url=one_token_chunks.base_url,
        model=MODEL,
        load_values=[2],
        num_requests=4,
        input_tokens=4,
        output_tokens=OUTPUT_TOKENS,
        max_send_lag_ms=1000,
    )
    agreeing = run_benchmark(config, counter=_WordCounter())
    assert {record.retokenized_completion_tokens for record in agreeing.records[0]} == {OUTPUT_TOKENS}
    assert agreeing.result.points[0].retokenized_divergent_count == 0
    diverging = run_benchmark(config, counter=_WordCounter(extra_tokens=1)).result.points[0]
    assert diverging.retokenized_divergent_count == 4
    assert diverging.max_retokenized_divergence == pytest.approx(1 / OUTPUT_TOKENS)
