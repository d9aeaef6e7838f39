"""A flag and its value in one argument, as another launcher's command list passes it
(param.unknown-flag, details.joined)."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import QUIET_HOST, of_id

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.estimate.gpus import parse_gpu_specs


def _joined(engine: str, parameters: str | list[str], *, items_are_arguments: bool = True) -> list[Finding]:
    findings = check_plan(
        DeploymentPlan(
            engine=engine,
            version=None,
            backend_parameters=parameters,
            gpus=parse_gpu_specs("1xH100"),
            host=QUIET_HOST,
            items_are_arguments=items_are_arguments,
        )
    )
    return [finding for finding in of_id(findings, "param.unknown-flag") if finding.details.get("joined")]


def test_a_compose_list_item_with_flag_and_value_stops_vllm() -> None:
    # vllm-project/vllm#22072: command: ["serve", "HuggingFaceTB/SmolLM3-3B", "--dtype auto"].
    (finding,) = _joined("vllm", ["--dtype auto", "--max-model-len", "8192"])
    assert finding.severity is Severity.ERROR
    assert "'--dtype' and 'auto' as two arguments" in finding.fix


def test_modelyards_own_lines_are_split_and_silent() -> None:
    assert _joined("vllm", ["--dtype auto", "--max-model-len 8192"], items_are_arguments=False) == []
    assert _joined("sglang", "--tp-size 2 --context-length=8192") == []  # argparse splits '='


def test_llama_cpp_takes_no_equals_and_llama_box_goes_on() -> None:
    (refused,) = _joined("llama.cpp", "--ctx-size=16384 -ngl 99")
    assert refused.severity is Severity.ERROR
    assert [finding.severity for finding in _joined("llama-box", ["--main-gpu 1", "--ctx-size 8192"])] == [
        Severity.WARNING,
        Severity.WARNING,
    ]
    assert _joined("llama.cpp", "--ctx-size 16384 -ngl 99") == []


def test_engines_with_their_own_parsers_are_left_alone() -> None:
    assert _joined("custom", ["--dtype auto"]) == []


def test_a_path_with_a_space_is_not_a_flag() -> None:
    assert _joined("vllm", ["--chat-template", str(Path("/templates/my template.jinja"))]) == []
