"""Faults on a real ``modelyard serve``: server SIGKILLs right after a create, deployments whose
engine cannot be launched, a full log directory, removal and a name deployed again.

The engine is the project's engine double playing vLLM (``python -m
modelyard.bench.reference_server vllm serve ...``), imported as a GPUStack-YAML custom backend and
run by the process runtime, exactly as a real engine would be. One server (data directory) serves
the module; each test uses deployments of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import ServeProcess, wait_until
from modelyard.testing.tiny_model import build_tiny_qwen3

pytestmark = pytest.mark.slow

DOUBLE_BACKEND_YAML = """\
backend_name: vllm-double
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{model_path}} --host {{worker_ip}} --port {{port}}
      --served-model-name {{model_name}}
    custom_framework: cpu
modelyard:
  family: custom
"""
RUNNING_SECONDS = 120.0
SIGKILL_SERIES = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("faults")
    model_dir = build_tiny_qwen3(root / "tiny")
    serve = ServeProcess(data_dir=root / "data")
    serve.start("--no-demo")
    serve.wait_until_answering()
    with serve.api() as client:
        imported = client.post("/api/v1/backends/import", content=DOUBLE_BACKEND_YAML)
        assert imported.status_code in (200, 201), imported.text
        added = client.post("/api/v1/models", json={"path": str(model_dir), "name": "tiny"})
        assert added.status_code == 201, added.text
    try:
        yield serve
    finally:
        serve.stop()


def deploy(server: ServeProcess, name: str, **fields: Any) -> Any:
    body = {"model": "tiny", "name": name, "backend": "vllm-double", "skip_verification": True, **fields}
    with server.api() as client:
        return client.post("/api/v1/deployments", json=body)


def deployment(server: ServeProcess, name: str) -> dict[str, Any] | None:
    with server.api() as client:
        response = client.get(f"/api/v1/deployments/{name}")
    return dict(response.json()) if response.status_code == 200 else None


def running_count(server: ServeProcess, name: str) -> int:
    found = deployment(server, name)
    return 0 if found is None else sum(1 for i in found["instances"] if i["state"] == "running")


def has_running(server: ServeProcess, name: str, count: int) -> bool:
    return running_count(server, name) == count


def first_state_is(server: ServeProcess, name: str, state: str) -> bool:
    found = deployment(server, name)
    return bool(found and found["instances"] and found["instances"][0]["state"] == state)


def remove(server: ServeProcess, name: str) -> None:
    with server.api() as client:
        assert client.delete(f"/api/v1/deployments/{name}").status_code == 202
    wait_until(lambda: deployment(server, name) is None, RUNNING_SECONDS, f"{name} removed")


def zombie_children(server: ServeProcess) -> list[int]:
    assert server.process is not None
    return [
        child.pid
        for child in psutil.Process(server.process.pid).children(recursive=True)
        if child.status() == psutil.STATUS_ZOMBIE
    ]


def test_server_killed_right_after_creates_ends_with_one_engine_per_replica_and_no_orphan(
    server: ServeProcess,
) -> None:
    names = [f"kill-{index}" for index in range(SIGKILL_SERIES)]
    for index, name in enumerate(names):
        created = deploy(server, name)
        assert created.status_code == 201, created.text
        time.sleep(index * 0.2 / (SIGKILL_SERIES - 1))  # the fault's timing: 0 to 200 ms after the create
        server.kill()
        server.start("--no-demo")
        server.wait_until_answering()
    for name in names:
        wait_until(functools.partial(has_running, server, name, 1), RUNNING_SECONDS, f"{name} running")
    engines = server.engine_tokens()
    assert {name: len(engines.get(name, set())) for name in names} == {name: 1 for name in names}
    for name in names:
        [instance] = deployment(server, name)["instances"]  # type: ignore[index]
        assert instance["state"] == "running"
    orphans = {name: tokens for name, tokens in engines.items() if name not in names}
    assert orphans == {}
    for name in names:
        remove(server, name)
    assert not any(name in server.engine_tokens() for name in names)


def test_rm_leaves_no_zombie_and_a_name_deployed_again_has_its_own_logs_and_events(
    server: ServeProcess,
) -> None:
    assert deploy(server, "again").status_code == 201
    wait_until(lambda: running_count(server, "again") == 1, RUNNING_SECONDS, "again running")
    [first] = deployment(server, "again")["instances"]  # type: ignore[index]
    remove(server, "again")
    assert zombie_children(server) == []
    assert deploy(server, "again").status_code == 201
    wait_until(lambda: running_count(server, "again") == 1, RUNNING_SECONDS, "again running again")
    [second] = deployment(server, "again")["instances"]  # type: ignore[index]
    assert second["id"] != first["id"] and second["uid"] != first["uid"]
    assert Path(second["log_path"]).parent != Path(first["log_path"]).parent
    assert Path(first["log_path"]).read_text().count("$ ") == 1
    assert Path(second["log_path"]).read_text().count("$ ") == 1
    with server.api() as client:
        events = client.get("/api/v1/deployments/again/events").json()
    assert {event["instance_uid"] for event in events} == {second["uid"]}
    assert not any("removed" in event["reason"] for event in events)
    remove(server, "again")


def _insert_deployment(
    server: ServeProcess, name: str, *, env: dict[str, str], parameters: list[str]
) -> None:
    """A row as an older release (or a bug) could have stored it, bypassing the API's checks."""
    connection = sqlite3.connect(server.data_dir / "modelyard.db")
    with contextlib.closing(connection):
        model_id = connection.execute("SELECT id FROM model_files WHERE name = 'tiny'").fetchone()[0]
        now = "2026-12-01 00:00:00.000000+00:00"
        connection.execute(
            "INSERT INTO deployments (uid, name, model_file_id, backend, backend_version, replicas, "
            "gpus_per_replica, backend_parameters, env, desired_state, skip_verification, warnings, "
            "created_at, updated_at, project_id) "
            "VALUES (?, ?, ?, 'vllm-double', '1.0', 1, 0, ?, ?, 'running', 1, '[]', ?, ?, "
            "(SELECT id FROM projects WHERE name = 'default'))",
            (uuid.uuid4().hex, name, model_id, json.dumps(parameters), json.dumps(env), now, now),
        )
        connection.commit()


def test_deployments_that_cannot_be_launched_are_refused_and_never_stop_the_others(
    server: ServeProcess,
) -> None:
    huge = "--chat-template=" + "x" * (128 * 1024)
    refused_env = deploy(server, "nul-env", env={"TOKEN": "ab\x00cd"})
    assert refused_env.status_code == 400 and "NUL byte" in refused_env.json()["error"]["message"]
    refused_parameter = deploy(server, "big-parameter", backend_parameters=[huge])
    assert refused_parameter.status_code == 400
    assert "backend_parameters" in refused_parameter.json()["error"]["message"]
    # The same values stored without the API's checks: the controller must cope with them.
    _insert_deployment(server, "stored-nul-env", env={"TOKEN": "ab\x00cd"}, parameters=[])
    _insert_deployment(server, "stored-big-parameter", env={}, parameters=[huge])
    assert deploy(server, "healthy").status_code == 201
    wait_until(lambda: running_count(server, "healthy") == 1, RUNNING_SECONDS, "healthy running")
    with server.api() as client:
        assert client.patch("/api/v1/deployments/healthy", json={"replicas": 2}).status_code == 200
    wait_until(lambda: running_count(server, "healthy") == 2, RUNNING_SECONDS, "healthy scaled to 2")
    for name, words in (("stored-nul-env", "NUL byte"), ("stored-big-parameter", "kernel's limit")):
        wait_until(
            functools.partial(first_state_is, server, name, "error"), RUNNING_SECONDS, f"{name} in error"
        )
        [instance] = deployment(server, name)["instances"]  # type: ignore[index]
        assert instance["reason"].startswith("cannot launch:") and words in instance["reason"], instance[
            "reason"
        ]
    for name in ("healthy", "stored-nul-env", "stored-big-parameter"):
        remove(server, name)


def _mount_full_tmpfs(folder: Path) -> None:
    folder.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root and must be able to mount a tmpfs: {mounted.stderr!r}")
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as filler:
        filler.write(b"\0" * 64 * 1024)


def test_a_full_log_directory_fails_its_instance_only_and_recovers(server: ServeProcess) -> None:
    assert deploy(server, "full-disk", replicas=0).status_code == 201
    # The instance's folder is a full tmpfs before the instance exists. The row and the replica
    # count it fills go in together: a reconcile pass (every second, and one for the create) that
    # saw the row under replicas 0 would delete it as scaled down, and the replica the PATCH then
    # asked for would be a new instance, in a folder with room (this test's old flake).
    instance_uid = uuid.uuid4().hex
    folder = server.data_dir / "instances" / instance_uid
    _mount_full_tmpfs(folder)
    try:
        connection = sqlite3.connect(server.data_dir / "modelyard.db")
        with contextlib.closing(connection), connection:
            deployment_id = connection.execute(
                "SELECT id FROM deployments WHERE name = 'full-disk'"
            ).fetchone()[0]
            connection.execute(
                "INSERT INTO instances (uid, deployment_id, replica_index, state, reason, host, gpu_ids, "
                "command, start_count, restart_count, verification, runtime, updated_at) VALUES "
                "(?, ?, 0, 'pending', 'waiting for placement', '127.0.0.1', '[]', '[]', 0, 0, '[]', "
                "'process', '2026-12-01 00:00:00.000000+00:00')",
                (instance_uid, deployment_id),
            )
            connection.execute("UPDATE deployments SET replicas = 1 WHERE id = ?", (deployment_id,))
        with server.api() as client:  # the same count through the API: the controller looks now
            assert client.patch("/api/v1/deployments/full-disk", json={"replicas": 1}).status_code == 200
        wait_until(
            lambda: (
                "No space left"
                in ((deployment(server, "full-disk") or {}).get("instances") or [{}])[0].get("reason", "")
            ),
            RUNNING_SECONDS,
            "the full disk named in the instance's reason",
        )
        assert deploy(server, "beside-full").status_code == 201
        wait_until(lambda: running_count(server, "beside-full") == 1, RUNNING_SECONDS, "beside-full running")
        remove(server, "beside-full")
    finally:
        subprocess.run(["umount", str(folder)], check=True)
    wait_until(
        lambda: running_count(server, "full-disk") == 1,
        RUNNING_SECONDS,
        "full-disk running once there is room",
    )
    remove(server, "full-disk")


def test_an_engine_started_with_its_own_api_key_answers_through_the_gateway(server: ServeProcess) -> None:
    assert deploy(server, "keyed", backend_parameters=["--api-key", "engine-own-key"]).status_code == 201
    wait_until(functools.partial(has_running, server, "keyed", 1), RUNNING_SECONDS, "keyed running")
    with server.api() as client:
        key = client.post("/api/v1/keys", json={"name": "keyed-client"}).json()["key"]
        [instance] = client.get("/api/v1/deployments/keyed").json()["instances"]
    assert "engine-own-key" not in " ".join(instance["command"])
    answer = httpx.post(
        f"{server.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "keyed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=30,
        trust_env=False,
        verify=shared_tls_context(),
    )
    assert answer.status_code == 200, answer.text
    remove(server, "keyed")
