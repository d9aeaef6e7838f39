"""``modelyard bench``: the commands a user types, against a real reference server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from modelyard.bench.records import RequestRecord, RunResult
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.cli.main import app
from modelyard.testing.http_clients import shared_tls_context

MODEL = "cli-model"


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServer]:
    config = ReferenceConfig(served_model_names=[MODEL], model_path=MODEL, ttft_ms=3, itl_ms=1)
    with ReferenceServer(config) as running:
        yield running


def test_run_writes_result_requests_csv_and_prompts(server: ReferenceServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "run",
            "--base-url",
            server.base_url + "/v1",
            "--model",
            MODEL,
            "--concurrency",
            "1,2",
            "--num-requests",
            "4",
            "--warmup-requests",
            "1",
            "--input-tokens",
            "8",
            "--output-tokens",
            "4",
            "--slo-ttft-ms",
            "1000",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "cli-model on vllm" in result.stdout
    run = RunResult.from_json((out / "result.json").read_text())
    assert [point.point.value for point in run.points] == [1.0, 2.0]
    assert run.engine.engine == "vllm"
    # The engine's own view, polled from /metrics while each point ran.
    assert "server_running_requests" in {series.name for series in run.points[0].timelines}
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 5
    first = json.loads(lines[0])
    assert (first["point_index"], first["warmup"]) == (0, True)
    assert RequestRecord.from_json(lines[1]).usage_completion_tokens == 4
    csv_lines = (out / "points.csv").read_text().splitlines()
    assert csv_lines[0].startswith("point_index,load_kind,load_value")
    assert len(csv_lines) == 3
    assert (out / "prompts.jsonl").exists()


def test_run_replays_saved_prompts(server: ReferenceServer, tmp_path: Path) -> None:
    runner = CliRunner()
    arguments = [
        "bench",
        "run",
        "--base-url",
        server.base_url,
        "--model",
        MODEL,
        # A closed loop: what is tested is the replay; an open loop's schedule check would make
        # the test depend on how loaded the machine is.
        "--concurrency",
        "1",
        "--num-requests",
        "3",
        "--input-tokens",
        "6",
        "--output-tokens",
        "2",
        "--json",
    ]
    first = runner.invoke(app, [*arguments, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    replay = runner.invoke(app, [*arguments, "--prompts-file", str(tmp_path / "a" / "prompts.jsonl")])
    assert replay.exit_code == 0, replay.output
    assert RunResult.from_json(replay.stdout).points[0].requests_succeeded == 3


def test_run_refuses_both_or_neither_load_option(server: ReferenceServer) -> None:
    result = CliRunner().invoke(app, ["bench", "run", "--base-url", server.base_url, "--model", MODEL])
    assert result.exit_code == 1  # InvalidInput, as one error line
    assert "--concurrency or --request-rate" in result.stderr


def test_an_invalid_run_exits_1_with_the_reason(server: ReferenceServer) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "run",
            "--base-url",
            server.base_url,
            "--model",
            "missing",
            "--concurrency",
            "1",
            "--num-requests",
            "2",
            "--input-tokens",
            "4",
            "--output-tokens",
            "2",
        ],
    )
    assert result.exit_code == 1
    assert "all 2 measured requests failed" in result.stderr


def test_reference_server_command_serves_with_engine_flags(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelyard.cli.main",
            "bench",
            "reference-server",
            "sglang",
            "--model-path",
            "/models/q",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--trust-remote-code",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        base_url = f"http://127.0.0.1:{port_file.read_text()}"
        models = httpx.get(base_url + "/v1/models", verify=shared_tls_context()).json()
        assert models["data"][0]["id"] == "/models/q"
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=10)
    assert "ignored: --trust-remote-code" in output.decode()


def test_selftest_reports_overheads_and_a_sustained_rate() -> None:
    from modelyard.bench.selftest import SelftestConfig, run_selftest

    result = run_selftest(
        SelftestConfig(
            ttft_ms=10,
            itl_ms=2,
            latency_requests=4,
            latency_output_tokens=4,
            capacity_output_tokens=4,
            capacity_seconds_per_rate=0.5,
            start_rate_per_s=20,
            max_rate_per_s=40,
        )
    )
    assert result.measured_ttft_ms is not None and result.ttft_overhead_ms is not None
    assert result.measured_ttft_ms >= 10 - 1
    assert result.steps[0].rate_per_s == 20
    assert result.stop_reason


def test_the_capacity_benchmark_script_runs() -> None:
    script = Path(__file__).parents[2] / "benchmarks" / "bench_client_capacity.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0
    assert "--peer-venv" in completed.stdout


def test_metrics_url_polls_another_server_than_the_one_benchmarked(
    server: ReferenceServer, tmp_path: Path
) -> None:
    # The gateway case: requests go to one address, the engine's /metrics is at another.
    engine_config = ReferenceConfig(
        served_model_names=["behind"], model_path="behind", flavor="sglang", ttft_ms=1, itl_ms=1
    )
    with ReferenceServer(engine_config) as engine:
        out = tmp_path / "run"
        arguments = ["bench", "run", "--base-url", server.base_url, "--model", MODEL, "--concurrency", "2"]
        arguments += ["--num-requests", "6", "--input-tokens", "8", "--output-tokens", "40", "--no-gpus"]
        arguments += ["--metrics-interval-s", "0.05", "--metrics-url", f"{engine.base_url}/metrics"]
        result = CliRunner().invoke(app, [*arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = RunResult.from_json((out / "result.json").read_text())
    sources = {series.source for point in run.points for series in point.timelines}
    assert sources == {"sglang:/metrics"}, sources


def test_gpu_ids_that_are_not_indices_are_refused(server: ReferenceServer) -> None:
    arguments = ["bench", "run", "--base-url", server.base_url, "--model", MODEL, "--concurrency", "1"]
    result = CliRunner().invoke(app, [*arguments, "--num-requests", "1", "--gpu-ids", "0,first"])
    assert result.exit_code != 0
    assert result.exit_code == 1  # InvalidInput, as one error line
    assert "--gpu-ids takes comma-separated GPU indices, got '0,first'" in result.stderr


def _start_at_run(server: ReferenceServer) -> list[str]:
    arguments = ["bench", "run", "--base-url", server.base_url, "--model", MODEL, "--concurrency", "1"]
    return [*arguments, "--num-requests", "2", "--input-tokens", "4", "--output-tokens", "2", "--no-gpus"]


def test_start_at_holds_the_first_request_until_the_agreed_time(server: ReferenceServer) -> None:
    # Two clients given one start time load the server together (the field run's side-by-side
    # gateway measurement); neither sends before it.
    start_at = time.time() + 0.5
    arguments = [*_start_at_run(server), "--start-at", f"{start_at:.3f}", "--json"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    started = RunResult.from_json(result.stdout).points[0].started_at
    assert datetime.fromisoformat(started).timestamp() >= start_at


def test_a_start_time_already_past_starts_at_once_and_says_so(
    server: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    past = datetime.fromtimestamp(time.time() - 5, UTC).isoformat()
    result = CliRunner().invoke(app, [*_start_at_run(server), "--start-at", past])
    assert result.exit_code == 0, result.output
    assert "this client starts late" in caplog.text


@pytest.mark.parametrize(
    ("start_at", "message"),
    [
        ("soon", "--start-at takes UNIX seconds or an ISO 8601 time, got 'soon'"),
        ("2026-11-30T19:00:00", "has no UTC offset"),
        (str(time.time() + 7200), "h away"),
    ],
    # Named: an id made from the time would differ between pytest -n's workers.
    ids=["not-a-time", "no-utc-offset", "two-hours-away"],
)
def test_bad_start_times_are_refused(server: ReferenceServer, start_at: str, message: str) -> None:
    result = CliRunner().invoke(app, [*_start_at_run(server), "--start-at", start_at])
    assert result.exit_code == 1  # InvalidInput, as one error line
    assert message in result.stderr
