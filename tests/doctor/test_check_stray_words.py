"""Words before the first flag (param.unexpected-value): every release refuses them, so a plan that
names no version gets the error too; a Python keyword typed as a word names the flag it stands for."""

from __future__ import annotations

import pytest
from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


@pytest.mark.parametrize("version", [None, "0.8.4", "0.25.0"])
def test_a_python_keyword_typed_as_a_word_names_the_flag(version: str | None) -> None:
    findings = of_id(plan_findings("trust_remote_code=True", version=version), "param.unexpected-value")
    assert [finding.severity for finding in findings] == [Severity.ERROR]
    assert "'trust_remote_code=True'" in findings[0].message
    assert "--trust-remote-code" in findings[0].fix


def test_a_keyword_with_a_value_becomes_the_flag_and_its_value() -> None:
    findings = of_id(plan_findings("max_model_len=8192 --dtype auto", version=None), "param.unexpected-value")
    assert "--max-model-len 8192" in findings[0].fix


def test_sglang_launch_server_takes_no_word_before_its_flags_either() -> None:
    plan = plan_findings("oops --tp-size 2", engine="sglang", version=None)
    findings = of_id(plan, "param.unexpected-value")
    assert findings and "SGLang" in findings[0].message
    assert "modelyard gives the model path itself" in findings[0].fix


def test_flag_values_and_env_assignments_are_no_stray_words() -> None:
    findings = plan_findings("--tensor-parallel-size 2 --max-model-len 8192")
    assert of_id(findings, "param.unexpected-value") == []
    env_like = plan_findings("VLLM_USE_V1=1 --max-model-len 8192")
    assert of_id(env_like, "param.unexpected-value") == []  # param.env-in-args names it
