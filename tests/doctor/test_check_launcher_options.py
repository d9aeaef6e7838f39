"""Launcher and container options among the engine's arguments (param.launcher-option), flags no
release has when the plan names no version, and the model given twice."""

from __future__ import annotations

import pytest
from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


@pytest.mark.parametrize("version", ["0.25.0", "0.8.5", None])
def test_docker_run_options_after_the_image_reach_vllm_and_are_refused(version: str | None) -> None:
    findings = plan_findings("--gpus all --shm-size 16g --max-model-len 8192", version=version)
    named = {finding.details["flag"] for finding in of_id(findings, "param.launcher-option")}
    assert named == {"--gpus", "--shm-size"}
    assert all(f.severity is Severity.ERROR for f in of_id(findings, "param.launcher-option"))
    # One finding per word: the unknown-flag check leaves them to this one.
    assert of_id(findings, "param.unknown-flag") == []


def test_the_image_among_the_arguments_names_the_docker_line() -> None:
    findings = plan_findings("--ipc=host vllm/vllm-openai:v0.8.5 --max-model-len 8192")
    images = [f for f in of_id(findings, "param.launcher-option") if "image" in f.details]
    assert [f.details["image"] for f in images] == ["vllm/vllm-openai:v0.8.5"]
    assert of_id(findings, "param.unexpected-value") == []


def test_a_pasted_docker_command_is_a_command_in_the_arguments() -> None:
    findings = plan_findings("docker run --gpus all lmsysorg/sglang:latest --tp-size 2", engine="sglang")
    assert of_id(findings, "param.command-in-args")


def test_python_interpreter_options_reach_sglang() -> None:
    findings = plan_findings("-u --tp-size 2", engine="sglang", version="0.5.10", gpus="2xH100")
    assert [f.details["flag"] for f in of_id(findings, "param.launcher-option")] == ["-u"]


def test_engine_flags_that_share_a_launcher_name_stay_quiet() -> None:
    # vLLM has --device and --port; SGLang has --nnodes: the engine's own flags are no launcher's.
    quiet = plan_findings("--port 8001", version="0.8.5") + plan_findings(
        "--nnodes 1 --tp-size 2", engine="sglang", version="0.5.10", gpus="2xH100"
    )
    assert of_id(quiet, "param.launcher-option") == []


def test_without_a_version_a_flag_no_release_has_is_refused() -> None:
    findings = plan_findings("--tp-size 2 --max_model_len 8192", version=None, gpus="2xH100")
    unknown = of_id(findings, "param.unknown-flag")
    assert [f.details["flag"] for f in unknown] == ["--tp-size"]
    assert unknown[0].severity is Severity.ERROR
    assert "--tensor-parallel-size" in unknown[0].fix


def test_without_a_version_abbreviations_and_old_flags_are_accepted() -> None:
    # --max-model is a prefix of --max-model-len; --use-v2-block-manager existed in 0.6.
    findings = plan_findings("--max-model 8192 --use-v2-block-manager", version=None)
    assert of_id(findings, "param.unknown-flag") == []


def test_vllm_refuses_a_model_flag_beside_the_positional_model() -> None:
    refused = of_id(plan_findings("--model /models/other"), "param.model-given-twice")
    assert [f.severity for f in refused] == [Severity.ERROR]
    ignored = of_id(plan_findings("--model /models/other", version="0.6.3"), "param.model-given-twice")
    assert [f.severity for f in ignored] == [Severity.WARNING]
    assert of_id(plan_findings("--max-model-len 8192"), "param.model-given-twice") == []


def test_sglang_serves_the_last_model_path() -> None:
    findings = plan_findings("--model-path /models/other", engine="sglang", version="0.5.10")
    assert [f.severity for f in of_id(findings, "param.model-given-twice")] == [Severity.WARNING]
