"""Raw-text parameter checks: each fires on the bad input and stays quiet on the corrected one."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters


def _run(parameters: list[str], engine: str = "vllm", version: str = "0.25.0") -> list[Finding]:
    return check_parameters(engine=engine, version=version, backend_parameters=parameters, env={})


def _with(findings: list[Finding], check_id: str) -> list[Finding]:
    return [finding for finding in findings if finding.check_id == check_id]


def test_trailing_space_at_the_end_of_a_line_is_a_warning() -> None:
    found = _with(_run(["--tool-call-parser qwen3_coder "]), "param.stray-whitespace")
    assert [finding.severity for finding in found] == [Severity.WARNING]
    assert "'--tool-call-parser qwen3_coder'" in found[0].fix
    assert _with(_run(["--tool-call-parser qwen3_coder"]), "param.stray-whitespace") == []


def test_whitespace_inside_a_quoted_value_is_an_error() -> None:
    found = _with(_run(["--tool-call-parser 'qwen3_coder\t'"]), "param.stray-whitespace")
    assert [finding.severity for finding in found] == [Severity.ERROR]
    # the value is otherwise valid: no second finding about the choice
    assert _with(_run(["--tool-call-parser 'qwen3_coder '"]), "param.invalid-choice") == []


def test_zero_width_and_non_breaking_spaces_are_found() -> None:
    found = _with(
        _run(["--tool-call-parser qwen3_coder\u200b", "--port\u00a08000"]), "param.invisible-character"
    )
    assert len(found) == 2
    assert "U+200B ZERO WIDTH SPACE" in found[0].message
    assert "U+00A0 NO-BREAK SPACE" in found[1].message
    assert _with(_run(["--tool-call-parser qwen3_coder", "--port 8000"]), "param.invisible-character") == []


def test_typographic_dash_in_a_flag() -> None:
    found = _with(_run(["\u2013tensor-parallel-size 2"]), "param.typographic-dash")
    assert found and found[0].severity is Severity.ERROR
    assert "'--tensor-parallel-size 2'" in found[0].fix
    assert _with(_run(["--tensor-parallel-size 2"]), "param.typographic-dash") == []


def test_typographic_quotes_around_json() -> None:
    bad = _run(["--speculative-config \u201c{}\u201d"])
    assert _with(bad, "param.typographic-quote")
    assert _with(_run(["--speculative-config '{}'"]), "param.typographic-quote") == []


def test_flag_split_across_two_lines() -> None:
    found = _with(_run(["--tool-call-", "parser qwen3_coder"]), "param.split-flag")
    assert found and "'--tool-call-parser qwen3_coder'" in found[0].fix
    assert _with(_run(["--tool-call-parser", "qwen3_coder"]), "param.split-flag") == []
    assert _with(_run(["--tool-call", "-parser qwen3_coder"]), "param.split-flag")
    assert _with(_run(["--enforce-eager", "--max-model-len 8192"]), "param.split-flag") == []


def test_quoted_value_split_across_two_lines() -> None:
    found = _with(
        _run(['--speculative-config \'{"method": "mtp",', '"num_speculative_tokens": 2}\'']),
        "param.split-flag",
    )
    assert found and found[0].severity is Severity.ERROR
    assert (
        _with(
            _run(['--speculative-config \'{"method": "mtp", "num_speculative_tokens": 2}\'']),
            "param.split-flag",
        )
        == []
    )


def test_unbalanced_quote() -> None:
    assert _with(_run(["--chat-template '{{ x }}"]), "param.unbalanced-quote")
    assert _with(_run(["--chat-template '{{ x }}'"]), "param.unbalanced-quote") == []


def test_shell_line_continuation() -> None:
    assert _with(_run(["--port 8000 \\", "--max-model-len 8192"]), "param.line-continuation")
    assert _with(_run(["--port 8000", "--max-model-len 8192"]), "param.line-continuation") == []


def test_env_assignment_in_the_arguments() -> None:
    found = _with(_run(["SGLANG_ENABLE_SPEC_V2=1", "--tp-size 2"], "sglang", "0.5.23"), "param.env-in-args")
    assert found and found[0].severity is Severity.ERROR
    assert "environment" in found[0].fix
    assert _with(_run(["--tp-size 2"], "sglang", "0.5.23"), "param.env-in-args") == []


def test_env_assignment_in_the_arguments_of_a_custom_engine() -> None:
    found = check_parameters(
        engine="custom", version=None, backend_parameters=["HF_TOKEN=x --port 1"], env={}
    )
    assert _with(found, "param.env-in-args")


def test_json_flag_given_python_syntax() -> None:
    found = _with(_run(["--speculative-config \"{'method': 'mtp'}\""]), "param.invalid-json")
    assert found and "double quotes" in found[0].message
    assert _with(_run(['--speculative-config \'{"method": "mtp"}\'']), "param.invalid-json") == []


def test_json_looking_value_of_a_transformers_flag() -> None:
    bad = check_parameters(
        engine="transformers", version=None, backend_parameters=["--extra '{a: 1}'"], env={}
    )
    good = check_parameters(
        engine="transformers", version=None, backend_parameters=["--extra '{\"a\": 1}'"], env={}
    )
    assert _with(bad, "param.invalid-json") and _with(good, "param.invalid-json") == []


def test_whole_command_pasted_into_the_parameters() -> None:
    found = _with(_run(["vllm serve Qwen/Qwen3.6-27B --tensor-parallel-size 2"]), "param.command-in-args")
    assert found and "'vllm serve Qwen/Qwen3.6-27B'" in found[0].fix
    bad = _run(["python3 -m sglang.launch_server --model-path /m --tp-size 2"], "sglang", "0.5.23")
    assert _with(bad, "param.command-in-args") and _with(bad, "param.unexpected-value") == []
    assert _with(_run(["--tensor-parallel-size 2"]), "param.command-in-args") == []


def test_env_assignment_after_a_flag_of_a_custom_engine() -> None:
    found = check_parameters(
        engine="custom", version=None, backend_parameters=["--port 1 HF_TOKEN=x"], env={}
    )
    assert _with(found, "param.env-in-args")


def test_a_jinja_template_given_to_an_engine_without_a_flag_table_is_not_read_as_json() -> None:
    findings = check_parameters(
        engine="transformers",
        version=None,
        backend_parameters=[
            "--chat-template '{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}'"
        ],
        env={},
    )
    assert _with(findings, "param.invalid-json") == []


def test_a_broken_json_value_without_a_flag_table_is_a_warning_not_a_refusal() -> None:
    [found] = _with(
        check_parameters(
            engine="transformers", version=None, backend_parameters=["--extra '{a: 1}'"], env={}
        ),
        "param.invalid-json",
    )
    assert found.severity is Severity.WARNING
