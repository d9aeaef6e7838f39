"""Variables a release no longer reads, with what replaced them (param.env-not-read)."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


def _not_read(
    env: dict[str, str], parameters: str = "", version: str = "0.25.0"
) -> list[tuple[str, Severity, object]]:
    findings = of_id(plan_findings(parameters, env=env, version=version), "param.env-not-read")
    return [(f.details["variable"], f.severity, f.details.get("replacement")) for f in findings]


def test_attention_backend_variable_points_to_the_flag_that_replaced_it() -> None:
    assert _not_read({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}) == [
        ("VLLM_ATTENTION_BACKEND", Severity.WARNING, "--attention-backend")
    ]


def test_the_release_that_still_reads_the_variable_stays_quiet() -> None:
    assert _not_read({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, version="0.14.1") == []


def test_a_setting_that_moved_into_a_json_config() -> None:
    assert _not_read({"VLLM_FLASH_ATTN_VERSION": "3"}) == [
        ("VLLM_FLASH_ATTN_VERSION", Severity.WARNING, "--attention-config")
    ]


def test_the_v0_switch_has_no_replacement_after_v0_was_removed() -> None:
    [(name, severity, replacement)] = _not_read({"VLLM_USE_V1": "0"})
    assert (name, severity) == ("VLLM_USE_V1", Severity.WARNING)
    assert replacement == "nothing: the V1 engine is the only one"


def test_environ_validation_makes_an_unread_variable_an_error() -> None:
    assert _not_read({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, "--fail-on-environ-validation") == [
        ("VLLM_ATTENTION_BACKEND", Severity.ERROR, "--attention-backend")
    ]


def test_a_variable_the_release_reads_stays_quiet() -> None:
    assert _not_read({"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "VLLM_PORT": "12345"}) == []
