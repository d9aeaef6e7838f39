"""Flag checks against the version tables: each fires on the bad input and not on the good one."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters


def _run(parameters: list[str], engine: str = "vllm", version: str = "0.25.0") -> list[Finding]:
    return check_parameters(engine=engine, version=version, backend_parameters=parameters, env={})


def _with(findings: list[Finding], check_id: str) -> list[Finding]:
    return [finding for finding in findings if finding.check_id == check_id]


def test_unknown_flag_names_the_closest_one() -> None:
    found = _with(_run(["--max-model-length 8192"]), "param.unknown-flag")
    assert found and found[0].severity is Severity.ERROR
    assert found[0].fix == "did you mean --max-model-len?"
    assert _with(_run(["--max-model-len 8192"]), "param.unknown-flag") == []


def test_unknown_flag_names_the_other_engines_equivalent() -> None:
    on_vllm = _with(_run(["--mem-fraction-static 0.9"]), "param.unknown-flag")
    assert on_vllm and "vLLM 0.25.0's equivalent is --gpu-memory-utilization" in on_vllm[0].fix
    on_sglang = _with(_run(["--gpu-memory-utilization 0.9"], "sglang", "0.5.23"), "param.unknown-flag")
    assert on_sglang and "equivalent is --mem-fraction-static" in on_sglang[0].fix
    assert _with(_run(["--mem-fraction-static 0.8"], "sglang", "0.5.23"), "param.unknown-flag") == []


def test_sglang_does_not_accept_underscores_but_vllm_does() -> None:
    assert _with(_run(["--tp_size 2"], "sglang", "0.5.23"), "param.unknown-flag")
    assert _with(_run(["--tensor_parallel_size 2"]), "param.unknown-flag") == []


def test_renamed_flag_rejected_by_this_version() -> None:
    found = _with(_run(["--mamba-scheduler-strategy extra_buffer"], "sglang", "0.5.21"), "param.removed-flag")
    assert found and found[0].fix == "use --mamba-radix-cache-strategy"
    good = _run(["--mamba-radix-cache-strategy extra_buffer"], "sglang", "0.5.21")
    assert _with(good, "param.removed-flag") == [] and _with(good, "param.unknown-flag") == []


def test_flag_added_in_a_later_version() -> None:
    found = _with(
        _run(["--mamba-radix-cache-strategy no_buffer"], "sglang", "0.5.10.post1"), "param.unknown-flag"
    )
    # sglang 0.5.14 server_args.py is the first to register --mamba-radix-cache-strategy
    assert found and "appears in SGLang 0.5.14" in found[0].message


def test_deprecated_alias_is_a_warning() -> None:
    found = _with(
        _run(["--mamba-scheduler-strategy extra_buffer"], "sglang", "0.5.18"), "param.deprecated-flag"
    )
    assert found and found[0].severity is Severity.WARNING
    assert "--mamba-radix-cache-strategy" in found[0].fix
    assert (
        _with(
            _run(["--mamba-radix-cache-strategy extra_buffer"], "sglang", "0.5.18"), "param.deprecated-flag"
        )
        == []
    )


def test_abbreviation_is_information() -> None:
    found = _with(_run(["--speculative-algo NEXTN"], "sglang", "0.5.23"), "param.abbreviated-flag")
    assert found and found[0].severity is Severity.INFO
    assert _with(_run(["--speculative-algorithm NEXTN"], "sglang", "0.5.23"), "param.abbreviated-flag") == []


def test_parser_name_outside_the_versions_choices() -> None:
    found = _with(_run(["--tool-call-parser qwen3-coder"]), "param.invalid-choice")
    assert found and "did you mean 'qwen3_coder'?" in found[0].fix
    assert _with(_run(["--tool-call-parser qwen3_coder"]), "param.invalid-choice") == []
    assert _with(_run(["--reasoning-parser qwen3"], "sglang", "0.5.10.post1"), "param.invalid-choice") == []


def test_parser_plugin_allows_other_names() -> None:
    plugin = ["--tool-parser-plugin /plugins/mine.py", "--tool-call-parser mine"]
    assert _with(_run(plugin), "param.invalid-choice") == []


def test_number_flag_given_text() -> None:
    assert _with(_run(["--gpu-memory-utilization high"]), "param.invalid-number")
    assert _with(_run(["--gpu-memory-utilization 0.85", "--max-model-len 32k"]), "param.invalid-number") == []


def test_missing_value() -> None:
    assert _with(_run(["--max-model-len", "--enforce-eager"]), "param.missing-value")
    assert _with(_run(["--max-model-len 8192", "--enforce-eager"]), "param.missing-value") == []


def test_value_given_to_a_switch_and_stray_argument() -> None:
    assert _with(_run(["--enforce-eager=true"]), "param.unexpected-value")
    assert _with(_run(["--enforce-eager true"]), "param.unexpected-value")
    assert _with(_run(["--enforce-eager", "--no-enable-prefix-caching"]), "param.unexpected-value") == []


def test_duplicate_flag() -> None:
    assert _with(_run(["--max-model-len 8192", "--max-model-len 16384"]), "param.duplicate-flag")
    assert _with(_run(["--max-model-len 8192"]), "param.duplicate-flag") == []
    dotted = ["--compilation-config.mode 3", "--compilation-config.cudagraph_mode FULL"]
    assert _with(_run(dotted), "param.duplicate-flag") == []


def test_auto_tool_choice_without_parser_on_vllm() -> None:
    found = _with(_run(["--enable-auto-tool-choice"]), "param.auto-tool-choice-without-parser")
    assert found and found[0].severity is Severity.ERROR
    good = _run(["--enable-auto-tool-choice", "--tool-call-parser qwen3_coder"])
    assert _with(good, "param.auto-tool-choice-without-parser") == []


def test_version_without_a_table_is_checked_against_the_nearest() -> None:
    # PyPI has vLLM 0.26.0 and 0.27.0, no 0.26.3
    found = _with(_run(["--max-model-len 8192"], version="0.26.3"), "param.flag-table-version")
    assert found and found[0].severity is Severity.INFO and "vLLM 0.26.0" in found[0].message
    assert _with(_run(["--max-model-len 8192"], version="0.26.0"), "param.flag-table-version") == []


def test_transformers_and_custom_engines_get_no_flag_findings() -> None:
    findings = check_parameters(
        engine="transformers", version="5.24", backend_parameters=["--anything 1"], env={}
    )
    assert findings == []
