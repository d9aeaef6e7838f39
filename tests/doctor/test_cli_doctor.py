"""``modelyard doctor`` end to end: the real CLI, a real model directory, and for ``--deployment``
the real REST API on loopback (real router, real SQLite file; only the controller is a double)."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from model_cache import ModelCache
from modelyard.cli.main import app
from modelyard.control.scheduler import LOCAL_WORKER, Worker, local_worker
from modelyard.hardware.gpus import GpuInventory
from modelyard.testing.http_clients import shared_tls_context

FIXTURE_LOGS = Path(__file__).parent / "fixtures" / "logs"

pytest.importorskip("transformers")


@pytest.fixture
def model_dir(test_models: ModelCache, tmp_path: Path) -> Path:
    return test_models.copy("tiny-qwen3", tmp_path / "model")


def run_doctor(*arguments: str, data_dir: Path, url: str = "http://127.0.0.1:9") -> tuple[int, Any, str]:
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["--url", url, "--data-dir", str(data_dir), "doctor", *arguments, "--json"],
        catch_exceptions=False,
    )
    try:
        payload = json.loads(result.stdout)["findings"]
    except (json.JSONDecodeError, KeyError, TypeError):
        payload = None
    return result.exit_code, payload, result.output


def _ids(payload: list[dict[str, Any]]) -> set[str]:
    return {finding["check_id"] for finding in payload}


def test_host_overview_on_this_host(tmp_path: Path) -> None:
    code, payload, _ = run_doctor(data_dir=tmp_path)
    assert code == 0
    assert isinstance(payload, list)
    # No GPU here: a note, not an error (CPU backends still run).
    assert all(finding["severity"] != "error" for finding in payload)
    assert _ids(payload) & {"host.nvml-unavailable", "host.no-gpus", "host.gpus"}


def test_good_model_on_transformers_exits_zero(model_dir: Path, tmp_path: Path) -> None:
    code, payload, output = run_doctor(
        "--model-dir", str(model_dir), "--backend", "transformers", data_dir=tmp_path
    )
    assert code == 0, output
    assert "model.chat-template-tools" in _ids(payload)


def test_broken_model_exits_one_and_names_the_problem(model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "tokenizer.json").unlink()
    code, payload, _ = run_doctor(
        "--model-dir", str(model_dir), "--backend", "transformers", data_dir=tmp_path
    )
    assert code == 1
    errors = [finding for finding in payload if finding["severity"] == "error"]
    assert errors[0]["check_id"] == "model.tokenizer-missing"
    assert errors[0]["doc_url"].endswith("docs/doctor/model.md#modeltokenizer-missing")


def test_planning_for_other_gpus_skips_this_hosts_checks(model_dir: Path, tmp_path: Path) -> None:
    code, payload, output = run_doctor(
        "--model-dir", str(model_dir), "--backend", "vllm", "--version", "0.25.0",
        "--args", "--tensor-parallel-size 2", "--gpus", "2x48GB", data_dir=tmp_path,
    )  # fmt: skip
    assert not any(finding["check_id"].startswith("host.") for finding in payload), output
    assert code == (1 if any(f["severity"] == "error" for f in payload) else 0)


def test_vllm_on_a_host_without_gpus_is_an_error(model_dir: Path, tmp_path: Path) -> None:
    code, payload, _ = run_doctor("--model-dir", str(model_dir), "--backend", "vllm", data_dir=tmp_path)
    assert code == 1
    assert _ids(payload) & {"host.nvml-unavailable", "host.no-gpus"}


def test_unknown_backend_is_one_line_and_exit_one(model_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["--data-dir", str(tmp_path), "doctor", "--model-dir", str(model_dir), "--backend", "llamafile"]
    )
    assert result.exit_code == 1
    assert "llamafile" in result.output


def test_log_file_is_explained(tmp_path: Path) -> None:
    log = FIXTURE_LOGS / "vllm_max_seq_len_issue34076.log"
    code, payload, _ = run_doctor("--log", str(log), "--backend", "vllm", data_dir=tmp_path)
    assert code == 1
    assert payload[0]["check_id"] == "log.max-model-len-exceeds-kv-cache"


def test_clean_log_exits_zero(tmp_path: Path) -> None:
    code, payload, _ = run_doctor("--log", str(FIXTURE_LOGS / "vllm_healthy_startup.log"), data_dir=tmp_path)
    assert (code, payload) == (0, [])


def test_table_output_names_id_fix_and_link(model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "tokenizer.json").unlink()
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["--data-dir", str(tmp_path), "doctor", "--model-dir", str(model_dir), "--backend", "transformers"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 1
    assert "model.tokenizer-missing" in result.stdout
    assert "docs/doctor/model.md#modeltokenizer-missing" in result.stdout


# -- --deployment, against the real REST API on loopback --------------------------------------------


@dataclass
class ControllerDouble:
    """Stands in for the controller (no engines start here): accepts pokes, reports no GPUs."""

    inventory: GpuInventory = field(
        default_factory=lambda: GpuInventory(unavailable_reason="no GPUs (double)")
    )

    def poke(self) -> None:
        pass

    def gpu_inventory(self) -> GpuInventory:
        return self.inventory

    def workers(self) -> list[Worker]:
        return [local_worker(self.gpu_inventory(), LOCAL_WORKER)]


@dataclass
class KeyCacheDouble:
    def invalidate(self) -> None:
        pass


@dataclass
class RunningApi:
    url: str
    data_dir: Path
    password: str
    context: Any


@pytest.fixture
def running_api(tmp_path: Path) -> Iterator[RunningApi]:
    from modelyard.server.api.router import api_router
    from modelyard.server.context import ServerContext
    from modelyard.server.errors import install_error_handlers
    from modelyard.services.users import ensure_admin
    from modelyard.settings import Settings
    from modelyard.store.database import Database

    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir, deploy_demo=False)
    database = Database.open(settings.database_url)
    password = ensure_admin(database, settings.admin_password_file)
    assert password is not None
    context = ServerContext(
        settings=settings, database=database, controller=ControllerDouble(), key_cache=KeyCacheDouble()
    )
    api = FastAPI()
    api.state.context = context
    api.include_router(api_router)
    install_error_handlers(api)
    # A bound socket handed to uvicorn: no moment when another test could take the port.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline_s = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline_s:
        time.sleep(0.02)
    assert server.started, "the API did not start"
    try:
        yield RunningApi(f"http://127.0.0.1:{port}", data_dir, password, context)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
        database.close()


def _deploy(api: RunningApi, model_dir: Path) -> None:
    auth = ("admin", api.password)
    with httpx.Client(
        base_url=api.url + "/api/v1", auth=auth, timeout=30, verify=shared_tls_context()
    ) as client:
        response = client.post("/models", json={"name": "tiny", "path": str(model_dir)})
        assert response.status_code == 201, response.text
        response = client.post(
            "/deployments", json={"model": "tiny", "name": "tiny", "backend": "transformers"}
        )
        assert response.status_code == 201, response.text


def _add_failed_instance(api: RunningApi, log_path: Path) -> None:
    from sqlalchemy import select

    from modelyard.store.tables import Deployment, Instance

    with api.context.database.session() as session:
        deployment = session.execute(select(Deployment).where(Deployment.name == "tiny")).scalar_one()
        session.add(
            Instance(
                deployment_id=deployment.id,
                replica_index=0,
                state="error",
                reason="exited with status 1",
                log_path=str(log_path),
                start_count=1,
                verification=[
                    {
                        "check_id": "verify.tool-call",
                        "status": "failed",
                        "message": "no tool_calls",
                        "duration_ms": 3,
                    }
                ],
            )
        )
        session.commit()


def test_healthy_deployment_exits_zero(running_api: RunningApi, model_dir: Path) -> None:
    _deploy(running_api, model_dir)
    code, payload, output = run_doctor(
        "--deployment", "tiny", data_dir=running_api.data_dir, url=running_api.url
    )
    assert code == 0, output
    assert "model.chat-template-tools" in _ids(payload)


def test_failed_instance_log_and_verification_are_reported(
    running_api: RunningApi, model_dir: Path, tmp_path: Path
) -> None:
    _deploy(running_api, model_dir)
    log = tmp_path / "start-1.log"
    shutil.copy(FIXTURE_LOGS / "vllm_no_cache_blocks_issue27508.log", log)
    _add_failed_instance(running_api, log)
    code, payload, _ = run_doctor("--deployment", "tiny", data_dir=running_api.data_dir, url=running_api.url)
    assert code == 1
    assert {"log.kv-cache-no-memory", "verify.tool-call"} <= _ids(payload)
    diagnosis = next(f for f in payload if f["check_id"] == "log.kv-cache-no-memory")
    assert diagnosis["message"].startswith("replica 0")


def test_unknown_deployment_fails_with_the_servers_message(running_api: RunningApi) -> None:
    code, _, output = run_doctor("--deployment", "ghost", data_dir=running_api.data_dir, url=running_api.url)
    assert code == 1
    assert "ghost" in output


def test_no_server_fails_with_a_clear_message(tmp_path: Path) -> None:
    code, _, output = run_doctor("--deployment", "tiny", data_dir=tmp_path, url="http://127.0.0.1:9")
    assert code == 1
    assert "no modelyard server" in output


# -- every check id has its doc entry --------------------------------------------------------------

REPOSITORY = Path(__file__).resolve().parents[2]
DOCTOR_SOURCES = sorted(
    str(path.relative_to(REPOSITORY / "src" / "modelyard" / "doctor"))
    for path in (REPOSITORY / "src" / "modelyard" / "doctor").rglob("*.py")
)


def test_every_check_id_has_a_doc_entry() -> None:
    import re

    pattern = re.compile(r"\"((?:host|model|log|verify|memory|param)\.[a-z0-9-]+)\"")
    ids: set[str] = set()
    for name in DOCTOR_SOURCES:
        ids |= set(pattern.findall((REPOSITORY / "src" / "modelyard" / "doctor" / name).read_text()))
    assert len(ids) > 40
    missing = []
    for check_id in sorted(ids):
        page = REPOSITORY / "docs" / "doctor" / f"{check_id.split('.')[0]}.md"
        if f"\n## {check_id}\n" not in page.read_text():
            missing.append(check_id)
    assert missing == []
