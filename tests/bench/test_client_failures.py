"""What the client records when the server misbehaves: no usage, a cut stream, refusals, SLO misses."""

from __future__ import annotations

import pytest

from modelyard.bench.records import RunConfig, SloTargets
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.runner import BenchmarkOutcome, run_benchmark

MODEL = "failing-model"


def _server(**changes: object) -> ReferenceServer:
    config = ReferenceConfig(
        served_model_names=[MODEL], model_path=MODEL, ttft_ms=5, itl_ms=1, output_tokens=6
    )
    return ReferenceServer(config.replace(**changes))


def _run(server: ReferenceServer, **changes: object) -> BenchmarkOutcome:
    config = RunConfig(
        base_url=server.base_url,
        model=MODEL,
        load_kind="concurrency",
        load_values=[2],
        num_requests=6,
        input_tokens=8,
        output_tokens=6,
        max_send_lag_ms=1000,
    )
    for name, value in changes.items():
        setattr(config, name, value)
    return run_benchmark(config)


def test_missing_usage_is_reported_and_never_guessed() -> None:
    with _server(omit_usage=True) as server:
        outcome = _run(server)
    point = outcome.result.points[0]
    assert point.requests_succeeded == 6
    assert point.missing_usage_count == 6
    assert point.output_token_throughput_per_s is None
    assert point.metrics["tpot_ms"].count == 0
    assert point.metrics["ttft_ms"].count == 6
    assert all(record.usage_completion_tokens is None for record in outcome.records[0])


def test_a_stream_cut_in_the_middle_is_a_failed_request() -> None:
    with _server(cut_after_chunks=3) as server:
        outcome = _run(server)
    point = outcome.result.points[0]
    assert point.requests_failed == 6
    assert not point.valid
    assert point.invalid_reason == "all 6 measured requests failed"
    record = outcome.records[0][0]
    assert record.error is not None and record.error.startswith("stream cut after 3 chunks")
    assert len(record.chunk_arrival_ns) == 3
    assert not outcome.result.valid


def test_a_stream_without_done_but_with_a_finish_reason_succeeds() -> None:
    with _server(omit_done=True) as server:
        outcome = _run(server)
    assert outcome.result.points[0].requests_succeeded == 6
    assert not any(record.saw_done for record in outcome.records[0])


def test_http_errors_are_recorded_with_status_and_body() -> None:
    with _server() as server:
        outcome = _run(server, model="not-served")
    point = outcome.result.points[0]
    assert point.requests_failed == 6
    record = outcome.records[0][0]
    assert record.http_status == 404
    assert record.error is not None and "does not exist" in record.error
    assert list(point.errors.values()) == [6]


def test_slo_attainment_counts_failed_requests_as_misses() -> None:
    with _server(cut_after_chunks=2) as server:
        point = _run(server, slo=SloTargets(ttft_ms=10_000)).result.points[0]
    assert point.goodput is not None
    assert (point.goodput.requests_sent, point.goodput.requests_met, point.goodput.attainment) == (6, 0, 0.0)


def test_slo_attainment_splits_on_the_ttft_bound() -> None:
    with _server(ttft_ms=30) as server:
        met = _run(server, slo=SloTargets(ttft_ms=10_000)).result.points[0].goodput
        missed = _run(server, slo=SloTargets(ttft_ms=5)).result.points[0].goodput
    assert met is not None and missed is not None
    assert met.attainment == 1.0 and met.attainment_ci_low > 0.5
    assert missed.attainment == 0.0 and missed.attainment_ci_high < 0.5
    assert met.goodput_requests_per_s > 0 and missed.goodput_requests_per_s == 0


def test_a_timeout_is_a_failed_request() -> None:
    with _server(ttft_ms=2000) as server:
        point = _run(server, request_timeout_s=0.2, num_requests=2).result.points[0]
    assert point.requests_failed == 2
    assert any(error.startswith("timeout") for error in point.errors)


@pytest.mark.parametrize("flavor", ["vllm", "sglang", "transformers"])
def test_every_flavor_is_measured_with_usage(flavor: str) -> None:
    with _server(flavor=flavor) as server:
        outcome = _run(server, num_requests=2)
    point = outcome.result.points[0]
    assert point.requests_succeeded == 2
    assert point.missing_usage_count == 0
    assert outcome.result.engine.engine == flavor
