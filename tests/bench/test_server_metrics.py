"""The engine's view: /metrics of vLLM and SGLang mapped into one timeline, the TTFT gap, NVML.

Parsing is checked against exposition texts in the engines' shapes; polling runs against the
reference server (``modelyard.bench.reference``) playing vLLM and SGLang on loopback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelyard.bench import gpu_sampler
from modelyard.bench.gpu_sampler import GpuObserver, GpuSample, GpuSampler
from modelyard.bench.records import RunConfig
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.runner import run_benchmark_async
from modelyard.bench.server_metrics import (
    ServerTimeline,
    metrics_url_for,
    parse_metrics_text,
    server_summary_from_series,
    server_ttft_mean_ms_from_series,
    ttft_gap,
)
from modelyard.bench.server_poller import ServerMetricsObserver, ServerMetricsPoller
from modelyard.testing.http_clients import shared_tls_context

# Names and layout as vLLM 0.10-0.25 (v1 engine) print them: the metric list captured from a
# running vLLM v0.10.2 in ai-dynamo/dynamo's docs (docs/backends/vllm/prometheus.md) and the
# counters of vllm/v1/metrics/loggers.py. Values are ours; two data-parallel engines (label
# ``engine``) show that counts are summed and ratios averaged.
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 7.0
vllm:num_requests_running{engine="1",model_name="qwen"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 2.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.3
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="qwen"} 4.0
vllm:num_preemptions_total{engine="1",model_name="qwen"} 1.0
vllm:num_preemptions_created{engine="0",model_name="qwen"} 1.7645e+09
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 200.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 240.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 5000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="qwen"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 0.4
"""

# Older vLLM (0.6-0.9) names: gpu_cache_usage_perc and gpu_prefix_cache_*.
VLLM_OLD_METRICS = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama"} 0.25
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="llama"} 10.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="llama"} 4.0
"""

# Layout of SGLang's /metrics example in sgl-project/sglang docs/references/production_metrics.md,
# with the scheduler names of python/sglang/srt/metrics/collector.py. Values are ours.
SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 3.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 0.28
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 0.0075
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 2.5
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"} 9.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0e+06
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.30457592010498047
sglang:time_to_first_token_seconds_bucket{le="0.04",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
sglang:time_to_first_token_seconds_bucket{le="0.06",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
"""


def test_vllm_names_map_into_the_neutral_sample_summing_counts_and_averaging_ratios() -> None:
    sample = parse_metrics_text(VLLM_METRICS, elapsed_s=1.0)
    assert sample.running_requests == 12.0
    assert sample.waiting_requests == 3.0
    assert sample.kv_cache_usage_ratio == pytest.approx(0.4)
    assert sample.preemptions_total == 5.0
    assert sample.prefix_cache_hit_tokens_total == 800.0
    assert sample.prefix_cache_query_tokens_total == 2000.0
    assert sample.spec_accepted_tokens_total == 240.0
    assert sample.spec_draft_tokens_total == 300.0
    assert sample.ttft_histogram is not None
    assert sample.ttft_histogram.count == 10.0
    assert sample.ttft_histogram.upper_bounds_s[-1] == float("inf")


def test_older_vllm_names_are_read_too() -> None:
    sample = parse_metrics_text(VLLM_OLD_METRICS, elapsed_s=0.0)
    assert sample.kv_cache_usage_ratio == 0.25
    assert sample.prefix_cache_hit_tokens_total == 4.0


def test_sglang_names_map_into_the_same_sample() -> None:
    sample = parse_metrics_text(SGLANG_METRICS, elapsed_s=0.0)
    assert sample.running_requests == 12.0
    assert sample.waiting_requests == 3.0
    assert sample.kv_cache_usage_ratio == 0.28
    assert sample.preemptions_total == 9.0
    assert sample.prefix_cache_hit_tokens_total == 4.0e6
    assert sample.spec_accept_length_gauge == 2.5
    assert sample.ttft_histogram is not None and sample.ttft_histogram.count == 4.0


def test_window_figures_come_from_counter_deltas_between_first_and_last_poll() -> None:
    later = VLLM_METRICS
    for series_and_labels, before, after in [
        ('vllm:num_preemptions_total{engine="0"', "4.0", "10.0"),
        ('vllm:prefix_cache_queries_total{engine="0"', "1000.0", "2000.0"),
        ('vllm:prefix_cache_hits_total{engine="0"', "600.0", "1350.0"),
        ('_bucket{engine="0",le="0.1"', "10.0", "20.0"),
        ('_bucket{engine="0",le="+Inf"', "10.0", "20.0"),
        ('_count{engine="0"', "10.0", "20.0"),
        ('_sum{engine="0"', "0.4", "1.2"),
    ]:
        old = f'{series_and_labels},model_name="qwen"}} {before}'
        assert old in later
        later = later.replace(old, f'{series_and_labels},model_name="qwen"}} {after}')
    timeline = ServerTimeline(
        metrics_url="x",
        flavor="vllm",
        samples=[parse_metrics_text(VLLM_METRICS, 0.0), parse_metrics_text(later, 2.0)],
    )
    assert timeline.preemptions_during_run() == 6.0
    assert timeline.prefix_cache_hit_ratio() == pytest.approx(750.0 / 1000.0)
    # Ten new first tokens, 0.8 s between them, all in the (0.04, 0.1] bucket.
    assert timeline.server_ttft_mean_ms() == pytest.approx(80.0)
    median_ms = timeline.server_ttft_quantile_ms(0.5)
    assert median_ms is not None and 40.0 < median_ms <= 100.0
    series = {entry.name: entry for entry in timeline.to_series(offset_s=1.0)}
    assert series["server_running_requests"].times_s == [-1.0, 1.0]
    assert series["server_prefix_cache_hit_ratio"].values == [pytest.approx(0.75)]
    assert server_ttft_mean_ms_from_series(list(series.values())) == pytest.approx(80.0)
    summary = server_summary_from_series(list(series.values()))
    assert summary["preemptions"] == 6.0
    assert summary["prefix_cache_hit_ratio"] == pytest.approx(0.75)
    assert summary["engine_ttft_mean_ms"] == pytest.approx(80.0)
    assert summary["peak_running_requests"] == 12.0
    assert summary["mean_gpu_power_watts"] is None


def test_timeline_survives_its_json_form() -> None:
    timeline = ServerTimeline(
        metrics_url="u", flavor="sglang", samples=[parse_metrics_text(SGLANG_METRICS, 0.5)]
    )
    again = ServerTimeline.from_json(timeline.to_json())
    assert again == timeline


def test_metrics_url_is_at_the_engine_root() -> None:
    assert metrics_url_for("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url_for("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/metrics"


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def engine_double(request: pytest.FixtureRequest) -> Iterator[ReferenceServer]:
    """The reference server playing vLLM or SGLang, one request at a time (the rest queue)."""
    config = ReferenceConfig(flavor=request.param, ttft_ms=40, itl_ms=10, output_tokens=10, max_concurrency=1)
    with ReferenceServer(config) as server:
        yield server


async def _stream_ttft_ms(client: httpx.AsyncClient, url: str) -> float:
    body = {"model": "reference-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    started_ns = time.perf_counter_ns()
    first_ns: int | None = None
    async with client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if first_ns is None and line.startswith("data: ") and '"content"' in line:
                first_ns = time.perf_counter_ns()
    assert first_ns is not None
    return (first_ns - started_ns) / 1e6


async def test_polling_an_engine_double_shows_its_queue_and_its_ttft(engine_double: ReferenceServer) -> None:
    flavor = engine_double.config.flavor
    poller = ServerMetricsPoller(metrics_url_for(engine_double.base_url + "/v1"), interval_s=0.02)
    async with httpx.AsyncClient(verify=shared_tls_context()) as client:
        await poller.start()
        url = engine_double.base_url + "/v1/chat/completions"
        client_ttfts_ms = await asyncio.gather(*(_stream_ttft_ms(client, url) for _ in range(4)))
        timeline = await poller.stop()
    assert timeline.flavor == flavor
    assert timeline.failed_polls == 0
    assert len(timeline.samples) >= 2
    # One slot, four requests: the queue was seen.
    assert (timeline.peak("waiting_requests") or 0) >= 1
    assert timeline.server_ttft_request_count() == 4
    server_mean_ms = timeline.server_ttft_mean_ms()
    assert server_mean_ms is not None and server_mean_ms >= 40.0 - 0.5  # the event loop timer's precision
    gap = ttft_gap(client_ttfts_ms, timeline)
    assert gap is not None
    assert gap.client_request_count == 4
    assert gap.gap_mean_ms == pytest.approx(gap.client_mean_ms - gap.server_mean_ms)


async def test_an_unreachable_metrics_endpoint_is_counted_not_raised() -> None:
    poller = ServerMetricsPoller("http://127.0.0.1:9/metrics", interval_s=0.01, timeout_s=1.0)
    async with poller:
        pass
    timeline = poller.timeline()
    assert timeline.samples == []
    assert timeline.failed_polls >= 1
    assert timeline.last_error is not None and "ConnectError" in timeline.last_error


async def test_gpu_sampler_without_a_driver_returns_an_empty_timeline_with_the_reason() -> None:
    async with GpuSampler(interval_s=0.01) as sampler:
        pass
    timeline = sampler.timeline()
    if timeline.gpu_count:  # a host with GPUs: samples were taken
        assert timeline.samples
    else:
        assert timeline.samples == []
        assert timeline.unavailable_reason


async def test_the_runner_stores_the_server_view_beside_each_load_point() -> None:
    config = ReferenceConfig(flavor="sglang", ttft_ms=20, itl_ms=5, output_tokens=8, max_concurrency=2)
    with ReferenceServer(config) as server:
        run_config = RunConfig(
            base_url=server.base_url,
            model="reference-model",
            load_values=[4],
            num_requests=12,
            output_tokens=8,
            dataset="builtin",
        )
        url = metrics_url_for(server.base_url)
        outcome = await run_benchmark_async(
            run_config, observer_factories=[lambda: ServerMetricsObserver(url, interval_s=0.02), GpuObserver]
        )
    point = outcome.result.points[0]
    series = {entry.name: entry for entry in point.timelines}
    assert series["server_running_requests"].source == "sglang:/metrics"
    assert max(series["server_running_requests"].values) == 2
    assert max(series["server_waiting_requests"].values) >= 1
    server_ttft_ms = server_ttft_mean_ms_from_series(point.timelines)
    assert server_ttft_ms is not None and server_ttft_ms >= 20.0 - 0.5
    client_ttft_ms = point.metrics["ttft_ms"].mean
    assert client_ttft_ms is not None and client_ttft_ms >= server_ttft_ms


def test_real_vllm_0_25_metrics_captured_on_an_h200_map_into_the_sample() -> None:
    text = (Path(__file__).parent / "fixtures" / "vllm-0.25.0-metrics.txt").read_text()
    sample = parse_metrics_text(text, elapsed_s=0.0)
    assert sample.running_requests == 0.0
    assert sample.waiting_requests == 0.0
    assert sample.kv_cache_usage_ratio == 0.0
    assert sample.preemptions_total == 0.0
    assert sample.prefix_cache_hit_tokens_total == 55920.0
    assert sample.prefix_cache_query_tokens_total == 85670.0
    assert sample.generation_tokens_total == 15104.0
    assert sample.spec_draft_tokens_total is None  # no speculative decoding in that run
    assert sample.ttft_histogram is not None
    assert sample.ttft_histogram.count == 268.0
    assert sample.ttft_histogram.sum_s == pytest.approx(12.3583, abs=1e-3)


class _NvmlDouble:
    """Stands in for NVML on this GPU-less machine: two GPUs, each always 40 % busy."""

    def __init__(self) -> None:
        self.handles = [object(), object()]

    def name(self, index: int) -> str:
        return f"Test GPU {index}"

    def read(self, index: int, elapsed_s: float) -> GpuSample:
        return GpuSample(elapsed_s, index, 40.0, 1 << 30, 80 << 30, 100.0)

    def close(self) -> None:
        self.handles = []


async def test_gpu_sampler_samples_only_the_gpus_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine uses GPU 1 of two: the idle GPU 0 must not dilute its utilization.
    monkeypatch.setattr(gpu_sampler, "open_nvml", lambda: (_NvmlDouble(), None))
    async with GpuSampler(interval_s=0.01, gpu_indices=[1]) as sampler:
        pass  # the sampler reads once before it looks at the stop signal
    timeline = sampler.timeline()
    assert timeline.gpu_names == {1: "Test GPU 1"}
    assert timeline.samples and {sample.gpu_index for sample in timeline.samples} == {1}
    async with GpuSampler(interval_s=0.01, gpu_indices=[5]) as missing:
        pass
    assert missing.timeline().samples == []
    assert "GPU(s) [5] asked for, but this host has 2" in (missing.timeline().unavailable_reason or "")
