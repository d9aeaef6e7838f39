"""Run shapes: stop by duration, warm-up by time, ramp-up, the completions endpoint, API keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from modelyard.bench.records import RunConfig
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.runner import BenchmarkOutcome, run_benchmark

MODEL = "modes-model"


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServer]:
    config = ReferenceConfig(
        served_model_names=[MODEL], model_path=MODEL, ttft_ms=5, itl_ms=1, output_tokens=4
    )
    with ReferenceServer(config) as running:
        yield running


def _run(server: ReferenceServer, api_key: str | None = None, **changes: object) -> BenchmarkOutcome:
    config = RunConfig(
        base_url=server.base_url,
        model=MODEL,
        load_kind="concurrency",
        load_values=[2],
        num_requests=4,
        input_tokens=4,
        output_tokens=4,
        max_send_lag_ms=1000,
    )
    for name, value in changes.items():
        setattr(config, name, value)
    return run_benchmark(config, api_key=api_key)


def test_closed_loop_stops_after_the_duration(server: ReferenceServer) -> None:
    outcome = _run(server, num_requests=None, duration_s=0.5)
    records = outcome.records[0]
    # Each request takes about 10 ms: two workers send many in half a second, none after it.
    assert len(records) > 10
    first_send = min(record.actual_send_ns for record in records)
    assert all(record.actual_send_ns - first_send < 0.5e9 for record in records)
    assert outcome.result.points[0].requests_failed == 0


def test_open_loop_stops_after_the_duration(server: ReferenceServer) -> None:
    outcome = _run(server, load_kind="rate", load_values=[40], num_requests=None, duration_s=0.5)
    records = outcome.records[0]
    assert 5 <= len(records) <= 40
    assert max(record.scheduled_send_ns for record in records) < 0.5e9 + records[0].scheduled_send_ns


def test_warmup_by_time_marks_the_first_sends(server: ReferenceServer) -> None:
    outcome = _run(server, load_kind="rate", load_values=[40], num_requests=20, warmup_s=0.2)
    records = outcome.records[0]
    start = records[0].scheduled_send_ns
    for record in records:
        assert record.warmup == (record.scheduled_send_ns - start < 0.2e9)
    assert any(record.warmup for record in records)
    assert outcome.result.points[0].requests_sent == sum(1 for record in records if not record.warmup)


def test_closed_loop_ramp_up_starts_workers_one_after_another(server: ReferenceServer) -> None:
    outcome = _run(server, load_values=[4], num_requests=40, ramp_up_s=0.4)
    records = sorted(outcome.records[0], key=lambda record: record.actual_send_ns)
    start = records[0].actual_send_ns
    # Only the first worker runs during the first 0.1 s: its requests never overlap.
    early = [record for record in records if record.actual_send_ns - start < 0.09e9]
    assert len(early) >= 2
    assert all(later.actual_send_ns >= (earlier.end_ns or 0) for earlier, later in itertools.pairwise(early))
    # Later, all four run at once.
    assert any(later.actual_send_ns < (earlier.end_ns or 0) for earlier, later in itertools.pairwise(records))


def test_completions_endpoint_is_measured_too(server: ReferenceServer) -> None:
    point = _run(server, endpoint="completions").result.points[0]
    assert point.requests_succeeded == 4
    assert point.metrics["ttft_ms"].count == 4
    assert point.missing_usage_count == 0


def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    config = ReferenceConfig(
        served_model_names=[MODEL], model_path=MODEL, ttft_ms=1, itl_ms=1, api_key="k-123"
    )
    with ReferenceServer(config) as server:
        accepted = _run(server, api_key="k-123").result
        refused = _run(server).result
    assert accepted.points[0].requests_succeeded == 4
    assert accepted.config.api_key_given and "k-123" not in accepted.to_json()
    assert refused.points[0].requests_failed == 4
    assert next(iter(refused.points[0].errors)).startswith("HTTP 401")


def test_a_base_url_with_a_path_prefix_keeps_it() -> None:
    from modelyard.bench.client import BenchClient

    client = BenchClient("https://gateway.example:8443/tenant-a/v1/", api_key=None, endpoint="completions")
    assert client.request_path == "/tenant-a/v1/completions"


def test_each_load_point_sends_prompts_of_its_own(server: ReferenceServer) -> None:
    outcome = _run(server, load_values=[1, 2], repeats=2)
    used = [{record.prompt_id for record in records} for records in outcome.records]
    assert len(used) == 4 and all(len(ids) == 4 for ids in used)
    # No prompt is sent at two points, so a prefix cache cannot serve a later point.
    assert len(set().union(*used)) == 16
    # The same seed draws the same prompts again: two engines get identical work.
    again = _run(server, load_values=[1, 2], repeats=2)
    assert [{record.prompt_id for record in records} for records in again.records] == used
