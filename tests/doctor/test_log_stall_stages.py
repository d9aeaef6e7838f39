"""A start that stops making progress: the stage its log stopped in and what unblocks it, from
``diagnose_log`` and from ``modelyard doctor --log`` (the real CLI on real files).

Each fixture (``fixtures/stall_logs/``) is a start of vLLM 0.2x or SGLang 0.5.x cut mid-stage, in
the engines' own line forms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app
from modelyard.doctor.log_quiet import line_time, log_ended, quiet_within_log
from modelyard.doctor.log_signatures import STALL_SECONDS, diagnose_log
from modelyard.doctor.signatures.stall import shows_progress, stage_reached, stalled_finding
from modelyard.testing.stalling_engine import Flavor, StallAt, start_lines

STALL_LOGS = Path(__file__).parent / "fixtures" / "stall_logs"

# (fixture, engine, the stage key, a fragment of the fix)
STAGE_CASES = [
    ("vllm-collective-init.log", "vllm", "collective-init", "NCCL_P2P_DISABLE=1"),
    ("vllm-collective-init.log", "vllm", "collective-init", "--ipc=host"),
    ("vllm-collective-init.log", "vllm", "collective-init", "GLOO_SOCKET_IFNAME"),
    ("vllm-download.log", "vllm", "download", "HF_ENDPOINT"),
    ("vllm-weights.log", "vllm", "weights", "--safetensors-load-strategy eager"),
    ("vllm-compile.log", "vllm", "compile", "torch_compile_cache"),
    ("vllm-graph-capture.log", "vllm", "graph-capture", "--enforce-eager"),
    ("sglang-collective-init.log", "sglang", "collective-init", "--dist-init-addr"),
    ("sglang-weights.log", "sglang", "weights", "local NVMe disk"),
    ("sglang-compile.log", "sglang", "compile", "--enable-torch-compile"),
    ("sglang-graph-capture.log", "sglang", "graph-capture", "--disable-cuda-graph"),
    ("sglang-serving.log", "sglang", "serving", "NO_PROXY"),
]


def _read(name: str) -> str:
    return (STALL_LOGS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "engine", "stage", "fix"), STAGE_CASES)
def test_a_silent_start_names_the_stage_it_stopped_in_and_its_fix(
    name: str, engine: str, stage: str, fix: str
) -> None:
    (finding,) = diagnose_log(_read(name), engine=engine, stalled_seconds=900)
    assert finding.check_id == "log.stalled"
    assert finding.details["stage_key"] == stage
    assert "15 minutes" in finding.message
    assert fix in finding.fix


def test_the_engine_is_read_from_the_log_when_not_given() -> None:
    (finding,) = diagnose_log(_read("sglang-graph-capture.log"), stalled_seconds=900)
    assert "--disable-cuda-graph" in finding.fix  # SGLang: read from its lines
    (finding,) = diagnose_log(_read("vllm-graph-capture.log"), stalled_seconds=900)
    assert "--enforce-eager" in finding.fix


def test_a_stage_that_finished_is_named_as_the_last_one_done() -> None:
    (finding,) = diagnose_log(_read("vllm-after-weights.log"), engine="vllm", stalled_seconds=900)
    assert finding.details["after_stage"] == "loading the weights"
    assert "after loading the weights finished" in finding.message


def test_the_stage_is_the_last_begun_across_ranks_and_progress_bars() -> None:
    reached = stage_reached(_read("sglang-weights.log"))
    assert reached.stage is not None and reached.stage.key == "weights"
    assert reached.line.startswith("Loading safetensors checkpoint shards")


def test_the_controllers_own_limit_replaces_the_default_one() -> None:
    text = _read("vllm-compile.log")
    assert diagnose_log(text, stalled_seconds=30) == []
    (finding,) = diagnose_log(text, stalled_seconds=30, stall_after_seconds=20)
    assert finding.details["stage_key"] == "compile"
    assert "30 s" in finding.message


def test_log_lines_without_progress_count_as_silence() -> None:
    text = _read("vllm-collective-init-debug-polling.log")
    assert quiet_within_log(text) == pytest.approx(20 * 60 + 11)


def test_timestamps_of_vllm_sglang_and_iso_lines_are_read() -> None:
    assert line_time("(Worker pid=1) INFO 02-29 10:00:01 [x.py:1] y") is not None
    assert line_time("[2026-04-14 16:08:43 TP0] Init torch distributed begin.") is not None
    assert line_time("2025-12-11 17:47:01.799443+08:00 - gpustack.worker - INFO - x") is not None
    assert line_time("Loading safetensors checkpoint shards:   0% Completed") is None


def test_a_log_that_ended_in_a_traceback_is_no_stall() -> None:
    assert log_ended(_read("vllm-ended-with-traceback.log"))
    assert not log_ended(_read("vllm-weights.log"))


def _doctor_log(path: Path, *arguments: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(
        app, ["doctor", "--log", str(path), *arguments, "--json"], catch_exceptions=False
    )
    return result.exit_code, list(json.loads(result.stdout)["findings"])


def _copy(name: str, tmp_path: Path, *, age_seconds: float = 0.0) -> Path:
    path = tmp_path / name
    path.write_text(_read(name), encoding="utf-8")
    if age_seconds:
        written = time.time() - age_seconds
        os.utime(path, (written, written))
    return path


def test_cli_stalled_for_names_the_stage(tmp_path: Path) -> None:
    code, findings = _doctor_log(_copy("vllm-collective-init.log", tmp_path), "--stalled-for", "900")
    assert code == 1
    (finding,) = findings
    assert finding["check_id"] == "log.stalled"
    assert finding["details"]["stage_key"] == "collective-init"
    assert "NCCL_SOCKET_IFNAME" in finding["fix"]


def test_cli_reads_the_silence_from_the_files_last_write(tmp_path: Path) -> None:
    code, findings = _doctor_log(_copy("sglang-graph-capture.log", tmp_path, age_seconds=STALL_SECONDS + 60))
    assert code == 1
    assert [finding["details"]["stage_key"] for finding in findings] == ["graph-capture"]


def test_cli_reads_the_silence_from_lines_that_go_on_without_progress(tmp_path: Path) -> None:
    code, findings = _doctor_log(_copy("vllm-collective-init-debug-polling.log", tmp_path))
    assert code == 1
    assert [finding["details"]["stage_key"] for finding in findings] == ["collective-init"]


def test_cli_says_nothing_of_a_log_just_written_or_one_that_ended(tmp_path: Path) -> None:
    assert _doctor_log(_copy("vllm-weights.log", tmp_path)) == (0, [])
    old_and_ended = _copy("vllm-ended-with-traceback.log", tmp_path, age_seconds=STALL_SECONDS * 10)
    assert all(finding["check_id"] != "log.stalled" for finding in _doctor_log(old_and_ended)[1])


def test_cli_refuses_stalled_for_without_a_log(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "doctor", "--stalled-for", "60"])
    assert result.exit_code == 1
    assert "--stalled-for goes with --log" in result.output


@pytest.mark.parametrize(
    ("line", "engine"),
    [
        (
            "[2025-02-18 09:33:55] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
            "tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=2)",
            "sglang",
        ),
        (
            "(APIServer pid=8) INFO 04-16 17:17:55 [utils.py:233] non-default args: "
            "{'model_tag': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2}",
            "vllm",
        ),
    ],
)
def test_a_start_silent_after_its_arguments_names_the_hub_the_gpu_and_nccl(line: str, engine: str) -> None:
    findings = diagnose_log(line + "\n", engine=engine, stalled_seconds=STALL_SECONDS)
    assert [finding.check_id for finding in findings] == ["log.stalled"]
    assert findings[0].details["stage_key"] == "engine-start"
    assert "arguments read" in findings[0].message
    assert "HF_HUB_OFFLINE=1" in findings[0].fix and "NCCL_DEBUG=INFO" in findings[0].fix


def test_a_later_stage_replaces_the_start_of_the_processes() -> None:
    log = (
        "INFO 04-16 17:17:55 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3-8B'}\n"
        "INFO 04-16 17:18:02 [parallel_state.py:1] world_size=2 rank=0 local_rank=0 backend=nccl\n"
    )
    assert stage_reached(log).stage is not None
    assert stage_reached(log).stage.key == "collective-init"  # type: ignore[union-attr]


def test_a_start_waiting_for_its_ray_placement_group_names_the_placement_stage() -> None:
    log = (
        "INFO 04-01 02:45:50 ray_utils.py:320] The number of required GPUs exceeds the total number of "
        "available GPUs in the placement group.\n"
        "INFO 04-01 02:46:00 ray_utils.py:214] Waiting for creating a placement group of specs for 10 "
        "seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough "
        "resources\n"
    )
    finding = stalled_finding(log, 900, "vllm")
    assert finding.details["stage_key"] == "ray-placement"
    assert "ray status" in finding.fix
    # Its repeats while waiting are no progress for the live watch.
    assert not shows_progress("INFO Waiting for creating a group of placement of specs for 310 seconds.\n")


@pytest.mark.parametrize(
    ("flavor", "stage"),
    [("vllm", "collective-init"), ("vllm", "graph-capture"), ("sglang", "weights"), ("sglang", "compile")],
)
def test_cli_names_the_stage_of_the_stalling_double_s_own_log(
    tmp_path: Path, flavor: str, stage: str
) -> None:
    """The engine DOUBLE (a real process) starts, stops at ``stage`` and repeats what a stuck engine
    repeats; its log, read by ``modelyard doctor --log`` as a user would, names that stage."""
    log = tmp_path / "engine.log"
    command = [
        sys.executable,
        "-m",
        "modelyard.testing.stalling_engine",
        "--flavor",
        flavor,
        "--stall-at",
        stage,
    ]
    with log.open("w", encoding="utf-8") as output:
        engine = subprocess.Popen([*command, "--repeat-every", "0.05", "serve", "/models/m"], stdout=output)
        try:
            deadline = time.monotonic() + 30
            while (
                log.read_text(encoding="utf-8").count("\n")
                < len(start_lines(cast(Flavor, flavor), cast(StallAt, stage), "/models/m")) + 3
            ):
                assert time.monotonic() < deadline, "the double printed nothing"
                time.sleep(0.05)
        finally:
            engine.terminate()
            engine.wait(timeout=10)
    code, findings = _doctor_log(log, "--stalled-for", "900")
    assert code == 1
    (finding,) = findings
    assert finding["check_id"] == "log.stalled" and finding["details"]["stage_key"] == stage
