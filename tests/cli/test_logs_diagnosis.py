"""`modelyard logs` ends with what the doctor recognises in the log it printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import LiveServer

VLLM_OOM_TAIL = (
    "INFO 11-30 12:00:01 [gpu_model_runner.py:2000] Loading model weights took 14.99 GiB\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 47.38 GiB of which 1.02 GiB is free.\n"
)


@pytest.fixture
def deployed(live_server: LiveServer, tiny_model_dir: Path) -> tuple[LiveServer, Path]:
    assert live_server.cli("models", "add", str(tiny_model_dir), "--name", "tiny").exit_code == 0
    assert live_server.cli("deploy", "tiny", "--no-wait").exit_code == 0
    deployment = json.loads(live_server.cli("ps", "tiny", "--json").stdout)
    return live_server, Path(deployment["instances"][0]["log_path"])


def test_logs_of_a_failed_engine_end_with_the_diagnosis_on_stderr(deployed: tuple[LiveServer, Path]) -> None:
    server, log_path = deployed
    with log_path.open("a") as log:
        log.write(VLLM_OOM_TAIL)
    result = server.cli("logs", "tiny")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(VLLM_OOM_TAIL)  # the log itself is untouched on stdout
    assert "diagnosis" in result.stderr and "out of memory" in result.stderr.lower()
    assert "fix:" in result.stderr


def test_logs_of_a_healthy_engine_print_no_diagnosis(deployed: tuple[LiveServer, Path]) -> None:
    server, _ = deployed
    result = server.cli("logs", "tiny")
    assert result.exit_code == 0, result.output
    assert "diagnosis" not in result.stderr
