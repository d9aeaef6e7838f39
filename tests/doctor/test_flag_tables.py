"""The committed flag tables against flags checked by hand in the engines' own source.

Each expectation below was read from the release's source (file named in the comment), not from
the table, so a regression in ``scripts/extract_engine_flags.py`` shows up here.
"""

from __future__ import annotations

import shlex

import pytest

from modelyard.backends.catalog import load_builtin_backends
from modelyard.backends.flag_tables import FlagTable, available_versions, load_flag_table


def _table(engine: str, version: str) -> FlagTable:
    table = load_flag_table(engine, version)
    assert table is not None
    return table


def test_every_release_from_the_first_has_a_table() -> None:
    # PyPI listed 66 vLLM releases from 0.6.0 and 101 SGLang releases from 0.4.0 when the tables
    # were made (scripts/extract_engine_flags.py adds newer ones).
    vllm, sglang = available_versions("vllm"), available_versions("sglang")
    assert (vllm[0], len(vllm) >= 66) == ("0.6.0", True)
    assert (sglang[0], len(sglang) >= 101) == ("0.4.0", True)
    for release in ("0.8.5.post1", "0.10.1.1", "0.15.0", "0.25.1", "0.33.0"):
        assert release in vllm
    for release in ("0.4.1.post7", "0.5.0rc0", "0.5.10.post1", "0.5.20", "0.5.23"):
        assert release in sglang


@pytest.mark.parametrize(
    ("version", "default"), [("0.6.0", 0.9), ("0.19.1", 0.9), ("0.20.0", 0.92), ("0.33.0", 0.92)]
)
def test_vllm_gpu_memory_utilization_default_per_version(version: str, default: float) -> None:
    # 0.6.0 arg_utils.py: gpu_memory_utilization: float = 0.90 (EngineArgs), default=EngineArgs.x;
    # vllm/config/cache.py: Field(default=0.9) up to 0.19.1, Field(default=0.92) from 0.20.0
    spec = _table("vllm", version).lookup("--gpu-memory-utilization")
    assert spec is not None
    assert (spec.type, spec.takes_value, spec.default) == ("float", "one", default)


def test_vllm_tensor_parallel_size_has_the_tp_alias() -> None:
    # vllm/engine/arg_utils.py: add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs[...])
    table = _table("vllm", "0.19.1")
    spec = table.lookup("-tp")
    assert spec is not None and spec.name == "--tensor-parallel-size"
    assert (spec.type, spec.default) == ("int", 1)


def test_vllm_dtype_choices_come_from_the_literal_type() -> None:
    # vllm/config/model.py: ModelDType = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
    spec = _table("vllm", "0.33.0").lookup("--dtype")
    assert spec is not None
    assert spec.choices == ("auto", "half", "float16", "bfloat16", "float", "float32")
    assert spec.default == "auto"


def test_vllm_boolean_flags_have_no_forms_and_underscores_are_accepted() -> None:
    table = _table("vllm", "0.25.0")
    spec = table.lookup("--no-enable-prefix-caching")
    assert spec is not None and spec.name == "--enable-prefix-caching" and spec.type == "bool"
    assert table.lookup("--enable_prefix_caching") is spec  # FlexibleArgumentParser turns _ into -


def test_vllm_dataclass_flags_take_json_and_dotted_keys() -> None:
    # --speculative-config is a SpeculativeConfig dataclass field: parsed from JSON
    table = _table("vllm", "0.33.0")
    spec = table.lookup("--speculative-config")
    assert spec is not None and spec.type == "json"
    assert table.lookup("--speculative-config.method") is spec


def test_vllm_frontend_flags_registered_in_a_loop_over_get_kwargs() -> None:
    # 0.13.0 entrypoints/openai/cli_args.py: FrontendArgs.add_cli_args adds every field with
    # `for key, value in frontend_kwargs.items(): frontend_group.add_argument(f"--{key}", **value)`
    table = _table("vllm", "0.13.0")
    auto = table.lookup("--enable-auto-tool-choice")
    assert auto is not None and auto.type == "bool"
    origins = table.lookup("--allowed-origins")  # frontend_kwargs["allowed_origins"]["type"] = json.loads
    assert origins is not None and (origins.type, origins.takes_value) == ("json", "one")
    parser = table.lookup("--tool-call-parser")
    assert parser is not None and parser.choices is not None and "hermes" in parser.choices


def test_vllm_0_6_explicit_argparse_flags_with_choices() -> None:
    # 0.6.0 entrypoints/openai/cli_args.py: add_argument("--tool-call-parser", choices=["mistral", "hermes"])
    table = _table("vllm", "0.6.0")
    parser = table.lookup("--tool-call-parser")
    assert parser is not None and parser.choices == ("mistral", "hermes")
    assert table.tool_call_parsers == ("hermes", "mistral")
    assert table.lookup("--speculative-model") is not None  # removed in 0.8.3 (see the history tests)
    assert table.lookup("--reasoning-parser") is None  # first registered in 0.7.1


def test_vllm_pydantic_wrapped_fields_keep_their_type() -> None:
    # 0.9.2 vllm/config.py: max_num_seqs: SkipValidation[int] = None;
    # quantization: SkipValidation[Optional[QuantizationMethods]] (a Literal of the method names)
    table = _table("vllm", "0.9.2")
    seqs = table.lookup("--max-num-seqs")
    assert seqs is not None and seqs.type == "int"
    quantization = table.lookup("--quantization")
    assert quantization is not None and quantization.choices is not None
    assert {"awq", "fp8", "gptq", "compressed-tensors"} <= set(quantization.choices)


def test_sglang_mamba_strategy_renamed_between_versions() -> None:
    # 0.5.10.post1 server_args.py: --mamba-scheduler-strategy with MAMBA_SCHEDULER_STRATEGY_CHOICES
    old = _table("sglang", "0.5.10.post1").lookup("--mamba-scheduler-strategy")
    assert old is not None and old.choices == ("auto", "no_buffer", "extra_buffer") and old.default == "auto"
    # 0.5.18 server_args.py: DeprecatedAliasStoreAction with new_flag="--mamba-radix-cache-strategy"
    alias = _table("sglang", "0.5.18").lookup("--mamba-scheduler-strategy")
    assert alias is not None and alias.deprecated and alias.renamed_to == "--mamba-radix-cache-strategy"
    # 0.5.21 and later: the old name is gone
    assert _table("sglang", "0.5.21").lookup("--mamba-scheduler-strategy") is None
    assert _table("sglang", "0.5.23").lookup("--mamba-radix-cache-strategy") is not None


def test_sglang_tensor_parallel_flag_from_argparse_and_from_annotated_fields() -> None:
    # 0.5.10.post1: add_argument("--tensor-parallel-size", "--tp-size", type=int, default=ServerArgs.tp_size)
    old = _table("sglang", "0.5.10.post1").lookup("--tp-size")
    assert old is not None and old.name == "--tensor-parallel-size" and (old.type, old.default) == ("int", 1)
    # 0.5.23 arg_groups/fields/parallel.py: tp_size: A[int, Arg(aliases=["--tensor-parallel-size"])] = 1
    new = _table("sglang", "0.5.23").lookup("--tensor-parallel-size")
    assert new is not None and new.name == "--tp-size" and (new.type, new.default) == ("int", 1)


def test_parser_names_per_version_include_the_qwen36_parsers() -> None:
    for engine, version in [
        ("vllm", "0.19.1"),
        ("vllm", "0.33.0"),
        ("sglang", "0.5.10.post1"),
        ("sglang", "0.5.23"),
    ]:
        table = _table(engine, version)
        assert "qwen3" in table.reasoning_parsers
        assert "qwen3_coder" in table.tool_call_parsers
        spec = table.lookup("--tool-call-parser")
        assert spec is not None and spec.choices is not None and "qwen3_coder" in spec.choices
    # sglang 0.5.23 server_args.py: choices=["auto"] + tool_call_parser_choices
    choices = _table("sglang", "0.5.23").lookup("--tool-call-parser").choices  # type: ignore[union-attr]
    assert choices is not None and choices[0] == "auto"


def test_sglang_parsers_of_the_0_4_layout() -> None:
    # 0.4.6.post1: srt/function_call_parser.py ToolCallParserEnum, srt/reasoning_parser.py DetectorMap
    table = _table("sglang", "0.4.6.post1")
    assert table.tool_call_parsers == ("deepseekv3", "llama3", "mistral", "qwen25")
    assert table.reasoning_parsers == ("deepseek-r1", "qwen3")


def test_environment_variables_per_version() -> None:
    assert "VLLM_LOGGING_LEVEL" in _table("vllm", "0.33.0").env_vars
    assert "SGLANG_ENABLE_SPEC_V2" in _table("sglang", "0.5.10.post1").env_vars
    # 0.5.18 only reads it to warn "SGLANG_ENABLE_SPEC_V2 has been removed"; 0.5.23 not at all.
    assert "SGLANG_ENABLE_SPEC_V2" in _table("sglang", "0.5.18").deprecated_env_vars
    newest = _table("sglang", "0.5.23")
    assert "SGLANG_ENABLE_SPEC_V2" not in newest.env_vars
    assert "SGLANG_ENABLE_SPEC_V2" not in newest.deprecated_env_vars


def test_vllm_shorthands_of_flexible_argument_parser() -> None:
    # vllm/utils/argparse_utils.py: -O3 / -O 3 -> --optimization-level; -cc.mode=3 -> --compilation-config
    table = _table("vllm", "0.33.0")
    assert table.lookup("-O") is table.lookup("--optimization-level") is not None
    assert table.lookup("-cc.mode") is table.lookup("--compilation-config")
    assert table.lookup("--max-model-len.x") is None  # only JSON flags take dotted keys
    assert _table("sglang", "0.5.23").lookup("-O") is None


def test_every_builtin_engine_version_has_a_table_that_knows_its_run_command() -> None:
    """The built-in catalog and the tables agree: each version's own flags and env are valid there."""
    checked = 0
    for spec in load_builtin_backends():
        if spec.family not in {"vllm", "sglang"}:
            continue
        for version in spec.versions.values():
            table = _table(spec.family, version.version)
            assert table.exact, f"{spec.name} {version.version}: no flag table of its own"
            flags = [token for token in shlex.split(version.run_command) if token.startswith("--")]
            unknown = [flag for flag in flags if table.lookup(flag) is None]
            assert unknown == [], f"{spec.name} {version.version} run_command"
            prefixes = ("VLLM_",) if spec.family == "vllm" else ("SGLANG_", "SGL_")
            unread = [
                name for name in version.env if name.startswith(prefixes) and name not in table.env_vars
            ]
            assert unread == [], f"{spec.name} {version.version} env"
            checked += 1
    assert checked >= 6
