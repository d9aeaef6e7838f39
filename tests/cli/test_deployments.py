"""`modelyard deploy|ps|logs|scale|stop|start|rm` against the live server and a controller double."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import delete, select

from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.store.tables import Instance
from modelyard.testing.http_clients import shared_tls_context

from .conftest import FAIL_VARIABLE, LiveServer


@pytest.fixture
def with_model(live_server: LiveServer, tiny_model_dir: Path) -> LiveServer:
    assert live_server.cli("models", "add", str(tiny_model_dir), "--name", "tiny").exit_code == 0
    return live_server


def test_deploy_waits_until_running_and_prints_transitions(with_model: LiveServer) -> None:
    result = with_model.cli(
        "deploy", "tiny", "--name", "chat", "--args", "--max-new-tokens 8", "--env", "A=1"
    )
    assert result.exit_code == 0, result.output
    assert "running: ready" in result.stderr
    assert "chat is running" in result.stderr
    deployment = json.loads(with_model.cli("ps", "chat", "--json").stdout)
    assert deployment["backend_parameters"] == ["--max-new-tokens", "8"]
    assert deployment["env"] == {"A": "1"}
    assert deployment["events"][-1]["to_state"] == "running"


def test_deploy_reports_an_engine_failure_and_exits_1(with_model: LiveServer) -> None:
    result = with_model.cli("deploy", "tiny", "--env", f"{FAIL_VARIABLE}=1")
    assert result.exit_code == 1
    assert "engine exited with status 1" in result.stderr
    assert "modelyard logs tiny" in result.stderr
    # What really happens next, from the instance's record (not "retries with back-off" for all).
    assert re.search(r"the controller restarts it in (59|60) s", result.stderr), result.stderr


def test_deploy_of_unknown_backend_version_is_one_line(with_model: LiveServer) -> None:
    result = with_model.cli("deploy", "tiny", "--backend", "vllm", "--version", "9.9.9")
    assert result.exit_code == 1
    assert "no version '9.9.9'" in result.stderr
    assert json.loads(with_model.cli("ps", "--json").stdout) == []


def test_deploy_asking_for_gpus_on_a_cpu_host_is_refused(with_model: LiveServer) -> None:
    result = with_model.cli("deploy", "tiny", "--gpus", "2")
    assert result.exit_code == 1
    assert "needs 2 GPU(s), and there is no GPU here" in result.stderr
    assert "--backend transformers --gpus 0" in result.stderr


def test_a_gpu_backend_on_a_host_without_gpus_says_there_is_no_gpu(with_model: LiveServer) -> None:
    result = with_model.cli("deploy", "tiny", "--backend", "vllm")
    assert result.exit_code == 1
    assert "this backend needs a GPU, and there is none here (no GPUs (controller double))" in result.stderr
    assert "pass --gpus 1" not in result.stderr  # which would fail next
    assert "modelyard worker join" in result.stderr and "--backend transformers --gpus 0" in result.stderr


def test_ps_scale_stop_start_rm(with_model: LiveServer) -> None:
    assert with_model.cli("deploy", "tiny", "--no-wait").exit_code == 0
    table = with_model.cli("ps").stdout
    assert "tiny" in table and "running" in table
    assert with_model.cli("scale", "tiny", "2").exit_code == 0
    assert len(json.loads(with_model.cli("ps", "tiny", "--json").stdout)["instances"]) == 2
    assert with_model.cli("stop", "tiny").exit_code == 0
    assert json.loads(with_model.cli("ps", "tiny", "--json").stdout)["state"] == "stopped"
    assert with_model.cli("start", "tiny").exit_code == 0
    assert json.loads(with_model.cli("ps", "tiny", "--json").stdout)["state"] == "running"
    removed = with_model.cli("rm", "tiny", "--wait")
    assert removed.exit_code == 0, removed.output
    assert "removed tiny" in removed.stdout
    assert json.loads(with_model.cli("ps", "--json").stdout) == []


def test_deploy_sets_the_deployments_limits(with_model: LiveServer) -> None:
    result = with_model.cli("deploy", "tiny", "--no-wait", "--rpm", "120", "--concurrency", "4")
    assert result.exit_code == 0, result.output
    shown = json.loads(with_model.cli("ps", "tiny", "--json").stdout)["limits"]
    assert shown == {"requests_per_minute": 120, "tokens_per_minute": None, "max_concurrent_requests": 4}
    assert "120 rpm, 4 at once (every key together)" in with_model.cli("ps", "tiny").stdout
    refused = with_model.cli("deploy", "tiny", "--name", "other", "--no-wait", "--tpm", "0")
    assert refused.exit_code != 0 and "--tpm" in refused.output


def test_logs_tail_and_previous(with_model: LiveServer) -> None:
    with_model.cli("deploy", "tiny", "--no-wait")
    result = with_model.cli("logs", "tiny", "--tail", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 2\nline 3\n"
    assert with_model.cli("logs", "tiny").stdout.startswith("engine double start 1\n")
    previous = with_model.cli("logs", "tiny", "--previous")
    assert previous.exit_code == 1
    assert "started only once" in previous.stderr
    # A second start (stop, start) keeps the first start's log as the previous one.
    with_model.cli("stop", "tiny")
    with_model.cli("start", "tiny")
    assert with_model.cli("logs", "tiny").stdout.startswith("engine double start 2\n")
    assert with_model.cli("logs", "tiny", "--previous").stdout.startswith("engine double start 1\n")


def test_logs_of_every_start_are_listed_and_each_can_be_read(with_model: LiveServer) -> None:
    with_model.cli("deploy", "tiny", "--no-wait")
    for _ in range(2):  # three starts in all
        with_model.cli("stop", "tiny")
        with_model.cli("start", "tiny")
    auth = ("admin", with_model.password)
    listed = httpx.get(
        f"{with_model.url}/api/v1/deployments/tiny/logs/starts", auth=auth, verify=shared_tls_context()
    ).json()
    assert listed["current_start"] == 3
    assert [(start["start"], start["file"], start["current"]) for start in listed["starts"]] == [
        (1, "start-1.log", False),
        (2, "start-2.log", False),
        (3, "start-3.log", True),
    ]
    assert all(
        start["size_bytes"] == len("engine double start 1\nline 2\nline 3\n") for start in listed["starts"]
    )
    for number in (1, 2, 3):
        shown = with_model.cli("logs", "tiny", "--start", str(number))
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.startswith(f"engine double start {number}\n")
    assert with_model.cli("logs", "tiny", "--previous").stdout.startswith("engine double start 2\n")
    missing = with_model.cli("logs", "tiny", "--start", "7")
    assert missing.exit_code == 1
    assert "no log of start 7" in missing.stderr and "1, 2, 3" in missing.stderr
    both = with_model.cli("logs", "tiny", "--start", "1", "--previous")
    assert both.exit_code == 1
    assert "give one of them" in both.stderr


def test_logs_follow_streams_appended_lines_and_ends_with_the_instance(with_model: LiveServer) -> None:
    with_model.cli("deploy", "tiny", "--no-wait")
    deployment = json.loads(with_model.cli("ps", "tiny", "--json").stdout)
    log_path = Path(deployment["instances"][0]["log_path"])
    auth = ("admin", with_model.password)
    timeout = httpx.Timeout(10.0)
    url = f"{with_model.url}/api/v1/deployments/tiny/logs"
    with httpx.stream(
        "GET",
        url,
        params={"follow": True, "tail": 1},
        auth=auth,
        timeout=timeout,
        verify=shared_tls_context(),
    ) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()
        assert next(chunks) == b"line 3\n"
        with log_path.open("a") as log:
            log.write("appended while following\n")
        assert next(chunks) == b"appended while following\n"
        with with_model.database.session() as session:
            session.execute(delete(Instance))
            session.commit()
        assert list(chunks) == []  # the stream ends once the instance is gone


def test_gpus_shows_what_nvml_read(live_server: LiveServer) -> None:
    live_server.controller.inventory = GpuInventory(
        gpus=[
            GpuInfo(
                index=0,
                uuid="GPU-0",
                name="NVIDIA H200",
                memory_total_bytes=143771 * 2**20,
                memory_free_bytes=143771 * 2**20 - 600 * 2**20,
                memory_used_bytes=600 * 2**20,
                utilization_percent=3,
                temperature_celsius=31,
                power_watts=76.4,
                power_limit_watts=700.0,
                pcie_generation=1,
                pcie_width=16,
                pcie_max_generation=5,
                pcie_max_width=16,
            )
        ],
        driver_version="580.159.03",
        cuda_driver_version="13.0",
    )
    result = live_server.cli("gpus")
    assert result.exit_code == 0, result.output
    [row] = [line.split() for line in result.stdout.splitlines() if line.startswith("0 ")]
    assert row[1:3] == ["NVIDIA", "H200"]
    assert row[3:6] == ["0.6", "139.8", "140.4"]  # used, free, total GiB
    assert row[6:9] == ["3%", "31", "C"]
    assert "76/700 W" in result.stdout
    assert "Gen1 x16 (max Gen5 x16)" in result.stdout  # an idle link shows what it can do
    assert "driver 580.159.03, CUDA 13.0" in result.stdout
    as_json = json.loads(live_server.cli("gpus", "--json").stdout)
    assert as_json["gpus"][0]["temperature_celsius"] == 31


def test_gpus_on_a_host_without_them_says_why(live_server: LiveServer) -> None:
    result = live_server.cli("gpus")
    assert result.exit_code == 0
    assert "no GPUs: no GPUs (controller double)" in result.stdout


def _state(live_server: LiveServer, name: str) -> str:
    state: str = json.loads(live_server.cli("ps", name, "--json").stdout)["state"]
    return state


def test_stop_start_and_scale_wait_until_done_unless_no_wait(with_model: LiveServer) -> None:
    assert with_model.cli("deploy", "tiny").exit_code == 0
    with_model.controller.transition_seconds = 1.5
    stopped = with_model.cli("stop", "tiny")
    assert stopped.exit_code == 0, stopped.output
    assert "stopped tiny" in stopped.stdout
    assert "stopping: SIGTERM sent" in stopped.stderr  # the transitions it waited through
    assert _state(with_model, "tiny") == "stopped"
    started = with_model.cli("start", "tiny")
    assert started.exit_code == 0, started.output
    assert _state(with_model, "tiny") == "running"
    scaled = with_model.cli("scale", "tiny", "2")
    assert scaled.exit_code == 0, scaled.output
    running = json.loads(with_model.cli("ps", "tiny", "--json").stdout)["instances"]
    assert [instance["state"] for instance in running] == ["running", "running"]
    # --no-wait returns while the controller is still at it.
    assert with_model.cli("stop", "tiny", "--no-wait").stdout.strip() == "stopping tiny"
    assert _state(with_model, "tiny") == "stopping"


def test_keys_create_for_an_existing_name_names_rotate(live_server: LiveServer) -> None:
    first = live_server.cli("keys", "create", "me")
    assert first.exit_code == 0
    again = live_server.cli("keys", "create", "me")
    assert again.exit_code == 1
    assert "a key named 'me' already exists" in again.stderr
    assert "modelyard keys create me --rotate" in again.stderr
    rotated = live_server.cli("keys", "create", "me", "--rotate")
    assert rotated.exit_code == 0, rotated.output
    assert rotated.stdout.strip().startswith("my-") and rotated.stdout != first.stdout
    # --rotate on a new name creates it: the README's line works in any terminal, any number of times.
    fresh = live_server.cli("keys", "create", "other", "--rotate", "--json")
    assert json.loads(fresh.stdout)["name"] == "other"
    listing = json.loads(live_server.cli("keys", "list", "--json").stdout)
    assert [key["name"] for key in listing] == ["me", "other"]


def test_ps_fits_80_columns_in_a_terminal(with_model: LiveServer) -> None:
    with_model.cli("deploy", "tiny", "--env", f"{FAIL_VARIABLE}=1")
    environment = {
        **os.environ,
        "MODELYARD_URL": with_model.url,
        "MODELYARD_DATA_DIR": str(with_model.data_dir),
        "MODELYARD_PASSWORD": with_model.password,
        "TTY_COMPATIBLE": "1",  # rich renders as for a terminal
        "COLUMNS": "80",
        "NO_COLOR": "1",
    }
    reason = "engine exited with status 1: " + "torch.OutOfMemoryError: CUDA out of memory " * 3
    with with_model.database.session() as session:
        instance = session.scalars(select(Instance)).one()
        instance.reason = reason
        session.commit()
    shown = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "ps"], capture_output=True, text=True, env=environment
    )
    assert shown.returncode == 0, shown.stderr
    lines = [_plain(line) for line in shown.stdout.splitlines()]
    assert max(len(line) for line in lines) <= 80, lines
    # The reason wraps in its own column, whole: read the column back line by line.
    column = lines[0].index("REASON")
    table = [line for line in lines[1:] if not line.startswith("diagnosis")]
    assert " ".join(line[column:].strip() for line in table).split() == reason.split()
    assert "left out at 80 columns" in shown.stderr


def _plain(line: str) -> str:
    """The line without its ANSI styles (bold headers)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip()


def test_verify_runs_the_suite_again_and_a_pass_puts_the_instance_back(with_model: LiveServer) -> None:
    assert with_model.cli("deploy", "tiny").exit_code == 0
    with_model.controller.transition_seconds = 1.5  # the results come later: verify waits for them
    with_model.controller.verification_passes = False
    failed = with_model.cli("verify", "tiny")
    assert failed.exit_code == 1
    assert "verify.tool-call" in failed.stdout and "failed" in failed.stdout
    assert "kept out of rotation" in failed.stderr
    assert _state(with_model, "tiny") == "error"
    # After the fix, verify again: back in rotation.
    with_model.controller.verification_passes = True
    passed = with_model.cli("verify", "tiny")
    assert passed.exit_code == 0, passed.output
    assert "every check passed; in rotation" in passed.stdout
    assert _state(with_model, "tiny") == "running"


def test_verify_with_json_fails_as_one_json_object(with_model: LiveServer) -> None:
    assert with_model.cli("deploy", "tiny").exit_code == 0
    with_model.controller.verification_passes = False
    result = with_model.cli("verify", "tiny", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "verification_failed"
    [instance] = error["details"]["deployment"]["instances"]
    assert {check["check_id"]: check["status"] for check in instance["verification"]}[
        "verify.tool-call"
    ] == "failed"


def test_verify_of_a_stopped_deployment_says_to_start_it(with_model: LiveServer) -> None:
    assert with_model.cli("deploy", "tiny").exit_code == 0
    assert with_model.cli("stop", "tiny").exit_code == 0
    result = with_model.cli("verify", "tiny")
    assert result.exit_code == 1
    assert "no engine to verify" in result.stderr and "modelyard start" in result.stderr
