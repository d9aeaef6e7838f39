"""Secrets stay secret: a canary given as secret env values and as an engine flag reaches the
engine, and nothing else: not the data directory (database, logs, key file aside), not the REST
API's answers, not the CLI's, not the server's log. The data directory is the server's alone.

The engine is the reference server playing vLLM (the project's engine double), deployed through
the REST API as a custom backend.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import wait_until

from .conftest import HostileTarget

WAIT_SECONDS = 90.0


def _double_backend_yaml(name: str) -> str:
    return (
        f"backend_name: {name}\n"
        'default_version: "1.0"\n'
        "health_check_path: /health\n"
        "version_configs:\n"
        '  "1.0":\n'
        f"    run_command: {sys.executable} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}}"
        " --host {{worker_ip}} --port {{port}} --served-model-name {{model_name}}\n"
        "    custom_framework: cpu\n"
    )


def _files_containing(folder: Path, needles: list[bytes]) -> list[str]:
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            content = path.read_bytes()
            hits += [f"{path}: {needle.decode()}" for needle in needles if needle in content]
    return hits


def _engine_process(target: HostileTarget, name: str) -> psutil.Process:
    deadline = time.monotonic() + WAIT_SECONDS
    with target.client(admin=True) as client:
        while time.monotonic() < deadline:
            instances = client.get(f"/api/v1/deployments/{name}").json()["instances"]
            pid = instances[0]["pid"] if instances else None
            if pid is not None and instances[0]["log_path"] and Path(instances[0]["log_path"]).is_file():
                return psutil.Process(pid)
            time.sleep(0.1)
    raise AssertionError(f"the engine of {name!r} did not start in {WAIT_SECONDS:.0f} s")


def _log_line(client: httpx.Client, name: str, needle: str) -> str:
    """The first line of the engine's log containing ``needle``, once the engine has written it."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for line in client.get(f"/api/v1/deployments/{name}/logs").text.splitlines():
            if needle in line:
                return line
        time.sleep(0.1)
    raise AssertionError(f"the engine of {name!r} printed no line with {needle!r} in {WAIT_SECONDS:.0f} s")


def test_a_canary_secret_reaches_the_engine_and_nothing_else(
    target: HostileTarget, tiny_model_dir: Path
) -> None:
    canaries = {kind: f"canary-{kind}-{uuid.uuid4().hex}" for kind in ("token", "chosen", "flag")}
    with target.client(admin=True) as client:
        assert (
            client.post("/api/v1/backends/import", content=_double_backend_yaml("canary-double")).status_code
            == 201
        )
        model = client.post("/api/v1/models", json={"name": "canary-model", "path": str(tiny_model_dir)})
        assert model.status_code == 201, model.text
        created = client.post(
            "/api/v1/deployments",
            json={
                "model": "canary-model",
                "name": "canary",
                "backend": "canary-double",
                "env": {"HF_TOKEN": canaries["token"], "MY_SETTING": canaries["chosen"], "PLAIN": "visible"},
                "secret_env": ["MY_SETTING"],
                # The delay keeps the engine up while the test reads its environment (the
                # controller's readiness check has no key for it, so it is restarted after).
                "backend_parameters": ["--api-key", canaries["flag"], "--startup-delay-s", "30"],
                "skip_verification": True,
            },
        )
        assert created.status_code == 201, created.text
        engine = _engine_process(target, "canary")
        # vLLM prints its own arguments, the key among them: the engine double does as it does.
        printed = _log_line(client, "canary", "non-default args")
        engine_environment = "\0".join(f"{name}={value}" for name, value in engine.environ().items())
        engine_command = engine.cmdline()
        answers = [
            client.get("/api/v1/deployments").text,
            client.get("/api/v1/deployments/canary").text,
            client.get("/api/v1/deployments/canary/events").text,
            client.get("/api/v1/deployments/canary/logs").text,
        ]
        client.delete("/api/v1/deployments/canary")  # its engine restarts while it exists
    shown = json.loads(answers[1])
    cli = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "ps", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MODELYARD_URL": target.url, "MODELYARD_PASSWORD": target.password},
    )
    needles = [canary.encode() for canary in canaries.values()]

    # The engine got them in clear: the secrets are sealed at rest, not lost.
    assert f"HF_TOKEN={canaries['token']}" in engine_environment
    assert f"MY_SETTING={canaries['chosen']}" in engine_environment
    assert canaries["flag"] in engine_command
    # Nowhere else.
    assert _files_containing(target.data_dir, needles) == []
    assert [needle for needle in needles for answer in answers if needle.decode() in answer] == []
    assert cli.returncode == 0, cli.stderr
    assert [needle for needle in needles if needle.decode() in cli.stdout + cli.stderr] == []
    assert [needle for needle in needles if needle in target.log().encode()] == []
    # Shown masked, and named.
    assert shown["env"] == {"HF_TOKEN": "********", "MY_SETTING": "********", "PLAIN": "visible"}
    assert sorted(shown["secret_env"]) == ["HF_TOKEN", "MY_SETTING"]
    assert shown["backend_parameters"] == ["--api-key", "********", "--startup-delay-s", "30"]
    assert "********" in shown["instances"][0]["command"]
    assert "'api_key': ['********']" in printed


def test_the_data_directory_and_its_files_are_the_servers_alone(target: HostileTarget) -> None:
    assert stat.S_IMODE(target.data_dir.stat().st_mode) == 0o700
    for name in ("modelyard.db", "admin-password", "secret-key"):
        assert stat.S_IMODE((target.data_dir / name).stat().st_mode) == 0o600, name
    readable = [
        str(path)
        for path in target.data_dir.rglob("*")
        if not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) & 0o077
    ]
    assert readable == []


def test_an_engine_that_reads_its_key_from_the_environment_never_has_it_on_its_command_line(
    target: HostileTarget, tiny_model_dir: Path
) -> None:
    """Any local user can read /proc/PID/cmdline; the environment only the engine's own user."""
    key = f"canary-engine-key-{uuid.uuid4().hex}"
    extension = "    modelyard:\n      api_key_variable: VLLM_API_KEY\n"
    backend = _double_backend_yaml("env-key-double") + extension
    with target.client(admin=True) as client:
        assert client.post("/api/v1/backends/import", content=backend).status_code == 201
        model = client.post("/api/v1/models", json={"name": "env-key-model", "path": str(tiny_model_dir)})
        assert model.status_code == 201, model.text
        created = client.post(
            "/api/v1/deployments",
            json={
                "model": "env-key-model",
                "name": "env-key",
                "backend": "env-key-double",
                "backend_parameters": ["--api-key", key],
                "skip_verification": True,
            },
        )
        assert created.status_code == 201, created.text
        engine = _engine_process(target, "env-key")

        def instance_now() -> dict[str, Any]:
            return dict(client.get("/api/v1/deployments/env-key").json()["instances"][0])

        wait_until(lambda: instance_now()["state"] == "running", WAIT_SECONDS, "env-key running")
        instance = instance_now()
        command_line = Path(f"/proc/{engine.pid}/cmdline").read_bytes()
        environment = Path(f"/proc/{engine.pid}/environ").read_bytes().split(b"\0")
        engine_url = f"http://127.0.0.1:{instance['port']}/v1/chat/completions"
        chat = {"model": "env-key", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        without_key = httpx.post(
            engine_url, json=chat, timeout=30, trust_env=False, verify=shared_tls_context()
        )
        headers = {"Authorization": f"Bearer {key}"}
        with_key = httpx.post(
            engine_url, json=chat, headers=headers, timeout=30, trust_env=False, verify=shared_tls_context()
        )
        client.delete("/api/v1/deployments/env-key")
    assert key.encode() not in command_line
    assert b"--api-key" not in command_line
    assert f"VLLM_API_KEY={key}".encode() in environment
    # The engine still asks for it.
    assert without_key.status_code == 401
    assert with_key.status_code == 200
