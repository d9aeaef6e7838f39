"""Environment checks: how variables are written, and whether the engine version reads them."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters


def _run(env: dict[str, str] | list[str], engine: str = "sglang", version: str = "0.5.23") -> list[Finding]:
    return check_parameters(engine=engine, version=version, backend_parameters=[], env=env)


def _with(findings: list[Finding], check_id: str) -> list[Finding]:
    return [finding for finding in findings if finding.check_id == check_id]


def test_spaces_around_equals() -> None:
    found = _with(_run(["SGLANG_LOG_LEVEL = debug"]), "param.env-spaces")
    assert found and found[0].fix == "write SGLANG_LOG_LEVEL=debug"
    assert _with(_run(["HF_HUB_OFFLINE=1"]), "param.env-spaces") == []


def test_flag_or_shell_syntax_in_the_env_box() -> None:
    for bad in (["--tp-size 2"], ["export HF_HUB_OFFLINE=1"], ["HF_HUB_OFFLINE"], ["1BAD=x"]):
        assert _with(_run(bad), "param.env-syntax"), bad
    assert _with(_run(["HF_HUB_OFFLINE=1"]), "param.env-syntax") == []


def test_quoted_value_keeps_its_quotes() -> None:
    assert _with(_run(['HF_HUB_OFFLINE="1"']), "param.env-quoted-value")
    assert _with(_run(["HF_HUB_OFFLINE=1"]), "param.env-quoted-value") == []


def test_variable_this_version_no_longer_reads() -> None:
    found = _with(_run({"SGLANG_ENABLE_SPEC_V2": "1"}), "param.env-not-read")
    assert found and found[0].severity is Severity.WARNING
    assert "SGLang 0.5.23 does not read SGLANG_ENABLE_SPEC_V2" in found[0].message
    assert _with(_run({"SGLANG_ENABLE_SPEC_V2": "1"}, version="0.5.10.post1"), "param.env-not-read") == []


def test_variable_this_version_reads_only_to_warn_it_is_removed() -> None:
    found = _with(_run({"SGLANG_ENABLE_SPEC_V2": "1"}, version="0.5.18"), "param.env-not-read")
    assert found and "removed" in found[0].message


def test_other_engines_variable() -> None:
    assert _with(_run({"VLLM_USE_V1": "1"}), "param.env-not-read")
    assert _with(_run({"VLLM_LOGGING_LEVEL": "DEBUG"}, "vllm", "0.33.0"), "param.env-not-read") == []


def test_misspelled_variable_names_the_closest_one() -> None:
    found = _with(_run({"VLLM_LOGING_LEVEL": "DEBUG"}, "vllm", "0.33.0"), "param.env-not-read")
    assert found and found[0].fix == "did you mean VLLM_LOGGING_LEVEL?"
