"""History queries over every release, and the nearest release for versions without a table.

The facts are those of ``/work/shared/MODELS.md`` (read from the engines' packages), each checked
here against the source file named in the comment. Where the two disagree the source wins, and
the comment says so.
"""

from __future__ import annotations

import pytest

from modelyard.backends.flag_tables import EngineHistory, load_engine_history, load_flag_table
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters


def _history(engine: str) -> EngineHistory:
    history = load_engine_history(engine)
    assert history is not None
    return history


@pytest.mark.parametrize(
    ("asked", "answered", "match"),
    [
        ("0.26.0", "0.26.0", "exact"),
        ("v0.25.0", "0.25.0", "exact"),  # the tag spelling
        ("0.25.0+cu129", "0.25.0", "exact"),  # a local build of the same release
        ("0.26.3", "0.26.0", "between"),  # PyPI has 0.26.0 and 0.27.0, nothing between
        ("0.27.0rc1", "0.27.0", "between"),  # a release candidate: the release it leads to
        ("0.34.0", "0.33.0", "newer"),
        ("0.5.4", "0.6.0", "older"),
        ("latest", "0.33.0", "unparsable"),
        ("0.25.0-cu129", "0.25.0", "unparsable"),  # read by its leading number
    ],
)
def test_nearest_release_for_any_version(asked: str, answered: str, match: str) -> None:
    table = load_flag_table("vllm", asked)
    assert table is not None
    assert (table.version, table.requested_version, table.match) == (answered, asked, match)
    assert table.exact is (match == "exact")


def test_engines_without_tables_get_none() -> None:
    assert load_flag_table("transformers", "5.24") is None
    assert load_engine_history("custom") is None


def test_sglang_mamba_scheduler_strategy_renamed_then_removed() -> None:
    # MODELS.md: renamed to --mamba-radix-cache-strategy by 0.5.17 (old name a deprecated alias),
    # rejected from 0.5.21. Source: 0.5.7 server_args.py adds it; 0.5.14 makes it a
    # DeprecatedAliasStoreAction; 0.5.20 (arg_groups/fields/) no longer registers it.
    flag = _history("sglang").flag("--mamba-scheduler-strategy")
    assert flag is not None
    assert (flag.first, flag.last, flag.removed_in) == ("0.5.7", "0.5.19", "0.5.20")
    assert (flag.replacement, flag.deprecated_in) == ("--mamba-radix-cache-strategy", "0.5.14")


def test_sglang_cuda_graph_max_bs_replaced_by_its_decode_form() -> None:
    # MODELS.md says 0.5.23 removed it with 26 other deprecated aliases; the packages show the
    # removal one step earlier: 0.5.19 accepts it (DeprecatedAliasStoreAction, new_flag=
    # "--cuda-graph-max-bs-decode"), 0.5.20's server_args.py and arg_groups/ no longer name it,
    # together with 22 other aliases deprecated in 0.5.19.
    history = _history("sglang")
    flag = history.flag("--cuda-graph-max-bs")
    assert flag is not None
    assert (flag.removed_in, flag.replacement) == ("0.5.20", "--cuda-graph-max-bs-decode")
    assert history.replacement_at("--cuda-graph-max-bs", "0.5.23") == "--cuda-graph-max-bs-decode"
    removed_with_it = [
        name
        for name in load_flag_table("sglang", "0.5.19").flags  # type: ignore[union-attr]
        if (found := history.flag(name)) is not None and found.removed_in == "0.5.20" and found.deprecated_in
    ]
    assert len(removed_with_it) == 23


def test_a_replacement_that_was_removed_in_turn_is_followed() -> None:
    # 0.5.19: --piecewise-cuda-graph-compiler -> --cuda-graph-tc-compiler, which 0.5.22 dropped
    history = _history("sglang")
    assert history.replacement_at("--piecewise-cuda-graph-compiler", "0.5.21") == "--cuda-graph-tc-compiler"
    assert history.replacement_at("--piecewise-cuda-graph-compiler", "0.5.23") is None


def test_sglang_spec_v2_variable_warned_then_ignored() -> None:
    # MODELS.md: SGLANG_ENABLE_SPEC_V2 was removed (0.5.18 warns, 0.5.23 ignores it).
    history = _history("sglang")
    read = history.env_var("SGLANG_ENABLE_SPEC_V2")
    assert read is not None and read.removed_in == "0.5.14"
    (note, warned), *_ = history.deprecated_env_var("SGLANG_ENABLE_SPEC_V2")
    assert "has been removed" in note
    assert (warned.first, warned.removed_in) == ("0.5.14", "0.5.21")


def test_vllm_031_removals_and_the_new_alias() -> None:
    # MODELS.md: vLLM 0.31-0.33 removed --enable-mamba-fine-grained-prefix-cache and several
    # VLLM_* variables, and added --device-memory-utilization as an alias.
    history = _history("vllm")
    fine_grained = history.flag("--enable-mamba-fine-grained-prefix-cache")  # config/cache.py, 0.30.0 only
    assert fine_grained is not None and (fine_grained.first, fine_grained.removed_in) == ("0.30.0", "0.31.0")
    alias = history.flag("--device-memory-utilization")
    assert alias is not None and (alias.first, alias.removed_in) == ("0.31.0", None)
    timeout = history.env_var("VLLM_ENGINE_ITERATION_TIMEOUT_S")  # envs.py: in 0.31.0, not in 0.32.0
    assert timeout is not None and timeout.removed_in == "0.32.0"


def test_vllm_parsers_exist_from_their_first_release() -> None:
    # vllm/reasoning/qwen3_reasoning_parser.py appears in 0.9.0; qwen3coder_tool_parser.py in 0.10.0
    history = _history("vllm")
    qwen3 = history.reasoning_parser("qwen3")
    coder = history.tool_call_parser("qwen3_coder")
    assert qwen3 is not None and (qwen3.first, qwen3.removed_in) == ("0.9.0", None)
    assert coder is not None and coder.first == "0.10.0"
    assert history.tool_call_parser("no_such_parser") is None


def test_vllm_spellings_are_normalized_in_history_queries() -> None:
    history = _history("vllm")
    underscored, dashed = history.flag("--max_model_len"), history.flag("--max-model-len")
    assert underscored is not None and dashed is not None
    assert (underscored.ranges, underscored.removed_in) == (dashed.ranges, None)
    dotted = history.flag("--speculative-config.method")
    assert dotted is not None and dotted.first == "0.8.2"  # config.py: SpeculativeConfig as JSON
    assert history.flag("--no-such-flag") is None


def _findings(parameters: list[str], engine: str, version: str) -> list[Finding]:
    return check_parameters(engine=engine, version=version, backend_parameters=parameters, env={})


def test_removed_alias_finding_names_the_replacement_and_the_release() -> None:
    found = [
        finding
        for finding in _findings(["--cuda-graph-max-bs 64"], "sglang", "0.5.23")
        if finding.check_id == "param.removed-flag"
    ]
    assert found and found[0].severity is Severity.ERROR
    assert "removed in SGLang 0.5.20" in found[0].message and "SGLang 0.5.19" in found[0].message
    assert found[0].fix == "use --cuda-graph-max-bs-decode"
    assert found[0].table_version == "0.5.23"


def test_removed_flag_without_replacement_names_the_last_release() -> None:
    found = [
        finding
        for finding in _findings(["--enable-mamba-fine-grained-prefix-cache"], "vllm", "0.33.0")
        if finding.check_id == "param.removed-flag"
    ]
    assert found and "removed in vLLM 0.31.0" in found[0].message
    assert found[0].fix == "remove it, or deploy vLLM 0.30.0"


def test_findings_on_a_version_outside_the_tables_carry_the_release_that_answered() -> None:
    findings = _findings(["--max-model-len 8192", "--no-such-flag 1"], "vllm", "0.26.3")
    by_id = {finding.check_id: finding for finding in findings}
    assert by_id["param.flag-table-version"].table_version == "0.26.0"
    assert "vLLM 0.26.3" in by_id["param.unknown-flag"].message
    assert by_id["param.unknown-flag"].table_version == "0.26.0"
    assert by_id["param.unknown-flag"].to_json()["table_version"] == "0.26.0"


def test_deprecated_alias_warning_names_the_release_that_rejects_it() -> None:
    found = [
        finding
        for finding in _findings(["--mamba-scheduler-strategy auto"], "sglang", "0.5.18")
        if finding.check_id == "param.deprecated-flag"
    ]
    assert found and found[0].severity is Severity.WARNING
    assert found[0].fix == "use --mamba-radix-cache-strategy; SGLang 0.5.20 rejects it"
