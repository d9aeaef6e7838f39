"""JSON flag values mangled on the way to the engine (param.invalid-json, details.mangled)."""

from __future__ import annotations

import pytest
from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.doctor.parameters.json_mangling import diagnose


def _mangled(parameters: str | list[str], **plan: object) -> list[tuple[str, Severity]]:
    findings = of_id(plan_findings(parameters, **plan), "param.invalid-json")  # type: ignore[arg-type]
    return [(f.details["mangled"], f.severity) for f in findings]


def test_a_value_split_at_its_commas_by_a_launcher() -> None:
    # GPUStack-style argument lists split at ',': each piece arrives as its own item.
    pieces = ['--speculative-config={"method":"mtp"', '"num_speculative_tokens":2}']
    assert _mangled(pieces) == [("split-on-commas", Severity.ERROR)]


def test_python_literal_syntax_without_a_version() -> None:
    assert _mangled("--speculative-config \"{'method': 'mtp'}\"", version=None) == [
        ("python-literal", Severity.ERROR)
    ]


def test_shell_quotes_kept_by_a_launcher_that_runs_no_shell() -> None:
    # The line's own quotes are the shell's; the inner ones reach the engine.
    assert _mangled(r"""--hf-overrides "'{\"rope_theta\": 1000000}'" """) == [
        ("python-literal", Severity.ERROR)
    ]


def test_an_object_quoted_twice() -> None:
    assert _mangled(r"""--hf-overrides '"{\"rope_theta\": 1000000}"'""") == [("quoted-twice", Severity.ERROR)]


def test_a_list_where_the_engine_builds_a_config_from_an_object() -> None:
    assert _mangled("--limit-mm-per-prompt '[1, 2]'") == [("not-an-object", Severity.ERROR)]


def test_sglang_model_override_arguments() -> None:
    assert _mangled(
        "--json-model-override-args \"{'rope_scaling': None}\"", engine="sglang", version="0.5.10"
    ) == [("python-literal", Severity.ERROR)]


@pytest.mark.parametrize(
    "parameters",
    [
        '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 2}\'',
        "--compilation-config 3",  # an optimisation level, not an object
        "--limit-mm-per-prompt '{\"image\": 2}'",
        '--chat-template "{{ messages }}"',  # a Jinja template, not JSON
    ],
)
def test_valid_values_stay_quiet(parameters: str) -> None:
    assert _mangled(parameters) == []
    assert _mangled(parameters, version=None) == []


def test_diagnose_reads_each_mangling_from_the_value_alone() -> None:
    assert diagnose('{"a": 1', following=['"b": 2}']) == "split-on-commas"
    assert diagnose('{"a": 1') == "invalid"
    assert diagnose('"[1]"') == "quoted-twice"
    assert diagnose("[1]", must_be_object=True) == "not-an-object"
    assert diagnose('{"a": 1}', must_be_object=True) is None
