"""``/metrics`` scraped by a real Prometheus (Debian's ``prometheus``), then queried.

The server has two gateway workers and two engine doubles, one playing vLLM and one SGLang, so
the gateway's counts are summed over processes and both engines' own metric names come through
with their deployment. Without the ``prometheus`` binary the test is skipped locally and fails
under CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.hardware.gpus import GpuInfo
from modelyard.server.metrics.families import WorkerGpus, gpu_families
from modelyard.testing.http_clients import shared_tls_context

from .conftest import NVML_DOUBLE_GPUS
from .served import ServedPlatform, free_port

VLLM_DEPLOYMENT = "metrics-vllm"
SGLANG_DEPLOYMENT = "metrics-sglang"


class Prometheus:
    def __init__(self, binary: str, directory: Path, target: str, token_file: Path) -> None:
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: modelyard\n    metrics_path: /metrics\n"
            f"    authorization:\n      type: Bearer\n      credentials_file: {token_file}\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}"]
        argv += [f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        self.log = directory / "prometheus.log"
        self.process = subprocess.Popen(argv, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if (
                    httpx.get(
                        f"http://127.0.0.1:{self.port}/-/ready", timeout=2, verify=shared_tls_context()
                    ).status_code
                    == 200
                ):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus did not get ready: {self.log.read_text()}")

    def query(self, expression: str) -> list[dict[str, Any]]:
        response = httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/query",
            params={"query": expression},
            timeout=10,
            verify=shared_tls_context(),
        )
        assert response.status_code == 200, response.text
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def wait_for(self, expression: str, minimum: float = 0.0, timeout_s: float = 30.0) -> float:
        """The first value of ``expression`` once it is above ``minimum`` (Prometheus scrapes every 1 s)."""
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expression)
            if result and float(result[0]["value"][1]) > minimum:
                return float(result[0]["value"][1])
            time.sleep(0.25)
        raise AssertionError(f"{expression} never rose above {minimum}: {result}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("the prometheus binary is missing under CI: .ci/run installs Debian's prometheus")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return binary


@pytest.fixture(scope="module")
def scraped(
    served_platform: ServedPlatform, prometheus_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServedPlatform, Prometheus]]:
    scratch = tmp_path_factory.mktemp("metrics")
    served_platform.deploy_double(VLLM_DEPLOYMENT, scratch, flavor="vllm", ttft_ms=5, itl_ms=2)
    served_platform.deploy_double(SGLANG_DEPLOYMENT, scratch, flavor="sglang", ttft_ms=5, itl_ms=2)
    prometheus = Prometheus(
        prometheus_binary,
        scratch,
        f"127.0.0.1:{served_platform.port}",
        served_platform.data_dir / "metrics-token",
    )
    try:
        yield served_platform, prometheus
    finally:
        prometheus.stop()


def _chat(platform: ServedPlatform, key: str, deployment: str, stream: bool) -> None:
    body = {"model": deployment, "messages": [{"role": "user", "content": "a b c"}], "stream": stream}
    with httpx.Client(timeout=30, verify=shared_tls_context()) as client:
        response = client.post(
            platform.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    assert response.status_code == 200, response.text


def test_prometheus_scrapes_the_gateway_the_controller_and_both_engines(
    scraped: tuple[ServedPlatform, Prometheus],
) -> None:
    platform, prometheus = scraped
    key = platform.create_key("metered")
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        jobs = [
            (deployment, stream) for deployment in (VLLM_DEPLOYMENT, SGLANG_DEPLOYMENT) for stream in (1, 0)
        ]
        list(pool.map(lambda job: _chat(platform, key, job[0], bool(job[1])), jobs * 5))
    assert prometheus.wait_for('up{job="modelyard"}') == 1
    requests = (
        f'sum(modelyard_gateway_requests_total{{deployment="{VLLM_DEPLOYMENT}",key="metered",status="200"}})'
    )
    assert prometheus.wait_for(requests, minimum=9) == 10
    streamed = f'sum(modelyard_gateway_time_to_first_token_seconds_count{{deployment="{VLLM_DEPLOYMENT}"}})'
    assert prometheus.wait_for(streamed, minimum=4) == 5
    tokens = (
        f'sum(modelyard_gateway_completion_tokens_total{{deployment="{SGLANG_DEPLOYMENT}",key="metered"}})'
    )
    assert prometheus.wait_for(tokens, minimum=79) == 80  # 10 answers of 8 tokens, as the engine reported
    running = f'modelyard_instances{{deployment="{SGLANG_DEPLOYMENT}",state="running"}}'
    assert prometheus.wait_for(running) == 1
    assert (
        prometheus.wait_for(f'modelyard_instance_time_to_running_seconds{{deployment="{VLLM_DEPLOYMENT}"}}')
        > 0
    )
    # Each engine's own metrics, under its own names, with the deployment added.
    assert (
        prometheus.wait_for(f'vllm:request_success_total{{deployment="{VLLM_DEPLOYMENT}"}}', minimum=9) >= 10
    )
    assert (
        prometheus.wait_for(f'sglang:num_requests_total{{deployment="{SGLANG_DEPLOYMENT}"}}', minimum=9) >= 10
    )
    assert prometheus.wait_for('sum(modelyard_engine_scrape_up{deployment=~"metrics-.*"})', minimum=1) == 2
    # ... and the replica's instance id, the one the REST API shows.
    instance_id = platform.api("GET", f"/api/v1/deployments/{VLLM_DEPLOYMENT}").json()["instances"][0]["id"]
    engine_series = prometheus.query(f'vllm:request_success_total{{deployment="{VLLM_DEPLOYMENT}"}}')
    assert {series["metric"]["instance_id"] for series in engine_series} == {str(instance_id)}


def test_latencies_tokens_errors_and_restarts_reach_prometheus(
    scraped: tuple[ServedPlatform, Prometheus],
) -> None:
    platform, prometheus = scraped
    key = platform.create_key("latencies")
    for _ in range(3):
        _chat(platform, key, SGLANG_DEPLOYMENT, stream=True)
    missing = httpx.post(
        platform.url + "/v1/chat/completions",
        json={"model": "no-such-model", "messages": []},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert missing.status_code == 404
    selector = f'deployment="{SGLANG_DEPLOYMENT}",key="latencies"'
    assert prometheus.wait_for(f"sum(modelyard_gateway_request_duration_seconds_count{{{selector}}})", 2) == 3
    assert prometheus.wait_for(f"sum(modelyard_gateway_prompt_tokens_total{{{selector}}})") > 0
    # 8 tokens an answer, one a chunk: 7 gaps after the first piece (more if pieces are split).
    gaps = f'sum(modelyard_gateway_inter_token_latency_seconds_count{{deployment="{SGLANG_DEPLOYMENT}"}})'
    assert prometheus.wait_for(gaps, minimum=20) >= 21
    # A refused request is an error by status and code, under no deployment (no new series).
    refused = (
        'sum(modelyard_gateway_errors_total{deployment="",key="latencies",status="404",'
        'code="model_not_found"})'
    )
    assert prometheus.wait_for(refused) == 1
    assert (
        prometheus.wait_for(
            f'count(modelyard_gateway_requests_in_flight{{deployment="{SGLANG_DEPLOYMENT}"}} == 0)'
        )
        == 1
    )
    restarts = f'modelyard_instance_restarts{{deployment="{SGLANG_DEPLOYMENT}"}}'
    assert [series["value"][1] for series in prometheus.query(restarts)] == ["0"]


def test_the_hosts_gpus_are_read_through_nvml_and_reach_prometheus(
    scraped: tuple[ServedPlatform, Prometheus],
) -> None:
    _, prometheus = scraped
    # The server's NVML reading code ran against the NVML double's two H200s (conftest).
    assert prometheus.wait_for("max(modelyard_gpu_telemetry_available)") == 1
    for index, gpu in enumerate(NVML_DOUBLE_GPUS):
        selector = f'gpu="{index}",uuid="{gpu["uuid"]}",name="NVIDIA H200"'
        assert (
            prometheus.wait_for(f"modelyard_gpu_memory_total_bytes{{{selector}}}")
            == gpu["memory_total_bytes"]
        )
        used = prometheus.query(f"modelyard_gpu_memory_used_bytes{{{selector}}}")
        assert float(used[0]["value"][1]) == gpu["memory_used_bytes"]
        readings = {
            name: prometheus.query(f"modelyard_gpu_{name}{{{selector}}}")
            for name in ("utilization_percent", "temperature_celsius", "power_watts")
        }
        assert {name: float(result[0]["value"][1]) for name, result in readings.items()} == {
            "utilization_percent": gpu["utilization_percent"],
            "temperature_celsius": gpu["temperature_celsius"],
            "power_watts": gpu["power_milliwatts"] / 1000,
        }


def test_metrics_need_the_scrape_token(scraped: tuple[ServedPlatform, Prometheus]) -> None:
    platform, _ = scraped
    refused = httpx.get(platform.url + "/metrics", timeout=10, verify=shared_tls_context())
    assert refused.status_code == 401
    assert "metrics-token" in refused.json()["error"]["message"]
    wrong = httpx.get(
        platform.url + "/metrics",
        headers={"Authorization": "Bearer wrong"},
        timeout=10,
        verify=shared_tls_context(),
    )
    assert wrong.status_code == 401


def test_the_gpus_of_each_cluster_worker_are_labelled_with_that_worker() -> None:
    # Two workers of a cluster, as the controller last read them (each numbers its GPUs from 0),
    # and a lost one whose NVML is not read any more.
    def h200(index: int, uuid: str, utilization: int, power_watts: float) -> GpuInfo:
        return GpuInfo(
            index, uuid, "NVIDIA H200", 150_000_000_000, 50_000_000_000, 100_000_000_000, utilization, 61,
            power_watts,
        )  # fmt: skip

    workers = [
        WorkerGpus("node-a", True, [h200(0, "GPU-a0", 87, 612.5), h200(1, "GPU-a1", 0, 70.0)]),
        WorkerGpus("node-b", True, [h200(0, "GPU-b0", 40, 300.0)]),
        WorkerGpus("node-c", False, []),
    ]
    families = {family.name: family for family in gpu_families(workers)}
    utilization = families["modelyard_gpu_utilization_percent"].samples
    assert [(sample.labels["worker"], sample.labels["gpu"], sample.value) for sample in utilization] == [
        ("node-a", "0", 87),
        ("node-a", "1", 0),
        ("node-b", "0", 40),
    ]
    power = families["modelyard_gpu_power_watts"].samples
    assert [(sample.labels["uuid"], sample.value) for sample in power] == [
        ("GPU-a0", 612.5),
        ("GPU-a1", 70.0),
        ("GPU-b0", 300.0),
    ]
    available = families["modelyard_gpu_telemetry_available"].samples
    assert [(sample.labels["worker"], sample.value) for sample in available] == [
        ("node-a", 1.0),
        ("node-b", 1.0),
        ("node-c", 0.0),
    ]


def test_every_query_of_the_grafana_dashboard_runs_and_the_gateway_panels_have_data(
    scraped: tuple[ServedPlatform, Prometheus],
) -> None:
    platform, prometheus = scraped
    key = platform.create_key("dashboard")
    # Traffic of the last minute for the rate() panels, in two rounds: a series' first sample is
    # not an increase to Prometheus, so the new key's series must be scraped before it grows.
    counter = 'sum(modelyard_gateway_requests_total{key="dashboard"})'
    for round_total in (2, 4):
        for _ in range(2):
            _chat(platform, key, VLLM_DEPLOYMENT, stream=True)
        prometheus.wait_for(counter, minimum=round_total - 1, timeout_s=60)
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    expressions = {
        panel["title"]: [target["expr"].replace("$deployment", ".*") for target in panel["targets"]]
        for panel in dashboard["panels"]
        if panel["type"] != "row"
    }
    for queries in expressions.values():
        for expression in queries:
            prometheus.query(expression)  # a query Prometheus refuses is a 400 here
    for title in ("Requests per second", "Instances by state", "Requests per second by gateway worker"):
        assert prometheus.wait_for(f"sum({expressions[title][0]})", timeout_s=60) > 0, title
