"""``scripts/extract_engine_flags.py`` on small package trees written here, offline.

The trees copy the layouts of the real releases (named in the comments) in a few lines each;
every module ends in ``raise SystemExit``, so importing one would fail the test: the extractor
only reads them. Two releases are packed into a history and read back by the package's loader.
"""

from __future__ import annotations

import importlib
import io
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from modelyard.backends.flag_tables import EngineHistory

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
NOT_IMPORTED = "\nraise SystemExit('the extractor imported this module')\n"

VLLM_FILES = {
    # 0.6-0.9: explicit add_argument calls, defaults from the EngineArgs dataclass
    "vllm/engine/arg_utils.py": """
        import argparse
        from dataclasses import dataclass
        from vllm.config.model import ModelConfig

        @dataclass
        class EngineArgs:
            max_model_len: int | None = None
            swap_space: float = 4

            @staticmethod
            def add_cli_args(parser):
                model_kwargs = get_kwargs(ModelConfig)
                parser.add_argument("--max-model-len", type=int, default=EngineArgs.max_model_len)
                parser.add_argument("--swap-space", type=float, default=EngineArgs.swap_space)
                parser.add_argument("--device", **model_kwargs["device"])
                parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
                return parser
    """,
    # 0.10 and later: config dataclasses, whose Literal types live in other modules
    "vllm/config/model.py": """
        from typing import Literal
        from vllm.platforms.kinds import DeviceKind

        @config
        @dataclass
        class ModelConfig:
            device: DeviceKind = "auto"
            \"\"\"Device type for vLLM execution.\"\"\"
    """,
    "vllm/platforms/kinds.py": 'DeviceKind = Literal["auto", "cuda", "cpu"]\n',
    # 0.13: FrontendArgs registers every field in a loop over get_kwargs(FrontendArgs)
    "vllm/entrypoints/openai/cli_args.py": """
        import json

        @config
        @dataclass
        class FrontendArgs:
            allowed_origins: list[str] = field(default_factory=lambda: ["*"])
            \"\"\"Allowed origins.\"\"\"
            enable_auto_tool_choice: bool = False
            \"\"\"Enable auto tool choice.\"\"\"
            tool_call_parser: str | None = None
            \"\"\"The tool call parser.\"\"\"

            @staticmethod
            def add_cli_args(parser):
                frontend_kwargs = get_kwargs(FrontendArgs)
                frontend_kwargs["allowed_origins"]["type"] = json.loads
                del frontend_kwargs["allowed_origins"]["nargs"]
                for key, value in frontend_kwargs.items():
                    parser.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        def make_arg_parser(parser):
            parser.add_argument("--api-server-count", "-asc", type=int, default=1)
            parser = FrontendArgs.add_cli_args(parser)
            parser = EngineArgs.add_cli_args(parser)
            return parser
    """,
    # 0.6-0.11 decorators, 0.11+ lazy registries
    "vllm/tool_parsers/hermes_tool_parser.py": """
        @ToolParserManager.register_module("hermes")
        class Hermes2ProToolParser:
            pass
    """,
    "vllm/tool_parsers/__init__.py": '_TOOL_PARSERS_TO_REGISTER = {"qwen3_coder": ("qwen3coder", "Q")}\n',
    "vllm/reasoning/__init__.py": '_REASONING_PARSERS_TO_REGISTER = {"qwen3": ("qwen3", "Qwen3")}\n',
    "vllm/envs.py": """
        import os
        environment_variables = {
            "VLLM_LOGGING_LEVEL": lambda: os.getenv("VLLM_LOGGING_LEVEL", "INFO"),
            "VLLM_OLD_KNOB": lambda: os.getenv("VLLM_OLD_KNOB"),
        }
    """,
}

SGLANG_FILES = {
    # 0.5.20 and later: A[type, Arg(...)] fields in arg_groups/fields/, registered by
    # add_cli_args_from_dataclass; deprecated spellings still through argparse in server_args.py
    "sglang/srt/arg_groups/fields/parallel.py": """
        from sglang.srt.arg_groups.arg_utils import A, Arg

        class ParallelFields:
            tp_size: A[int, Arg(help="The tensor parallelism size.", aliases=["--tensor-parallel-size"])] = 1
            mamba_radix_cache_strategy: A[Literal["auto", "no_buffer"], "Mamba strategy."] = "auto"
            hidden: A[int, Arg(no_cli=True)] = 0
    """,
    "sglang/srt/server_args.py": """
        from sglang.srt.arg_groups.fields.parallel import ParallelFields

        @dataclasses.dataclass
        class ServerArgs(ParallelFields):
            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument(
                    "--mamba-scheduler-strategy", dest="mamba_radix_cache_strategy",
                    action=DeprecatedAliasStoreAction, new_flag="--mamba-radix-cache-strategy",
                )
    """,
    # 0.4.2-0.4.6: one module per registry at the top of srt/
    "sglang/srt/function_call_parser.py": """
        class FunctionCallParser:
            ToolCallParserEnum: Dict[str, Type] = {"qwen25": Qwen25Detector, "llama3": Llama32Detector}
    """,
    "sglang/srt/parser/reasoning_parser.py": """
        class ReasoningParser:
            DetectorMap = {"qwen3": Qwen3Detector}
    """,
    "sglang/srt/environ.py": """
        class Envs:
            SGLANG_ENABLE_SPEC_V2 = EnvBool(False)
    """,
}


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) + NOT_IMPORTED)
    return root


@pytest.fixture(scope="module")
def extractor() -> Iterator[SimpleNamespace]:
    """The extractor's modules (scripts/engine_flags), imported from the checkout."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield SimpleNamespace(
            **{
                name: importlib.import_module(f"engine_flags.{name}")
                for name in ("archive", "history", "release_table", "releases")
            }
        )
    finally:
        sys.path.remove(str(SCRIPTS))


def _table(extractor: SimpleNamespace, engine: str, version: str, path: Path) -> dict[str, Any]:
    sources = extractor.archive.Sources(path, engine)
    table: dict[str, Any] = extractor.release_table.build_table(engine, version, sources, path.name)
    return table


def test_vllm_layouts_are_read_without_importing(extractor: SimpleNamespace, tmp_path: Path) -> None:
    table = _table(extractor, "vllm", "0.0.1", _write_tree(tmp_path / "vllm", VLLM_FILES))
    flags = table["flags"]
    assert flags["--max-model-len"] == {"type": "int", "takes_value": "one"}
    assert flags["--swap-space"]["default"] == 4  # default=EngineArgs.swap_space
    assert flags["--device"]["choices"] == ["auto", "cuda", "cpu"]  # the Literal of another module
    assert flags["--enable-prefix-caching"]["negations"] == ["--no-enable-prefix-caching"]
    assert flags["--api-server-count"]["aliases"] == ["-asc"]
    assert (flags["--allowed-origins"]["type"], flags["--allowed-origins"]["takes_value"]) == ("json", "one")
    assert flags["--enable-auto-tool-choice"]["type"] == "bool"
    assert flags["--tool-call-parser"]["choices"] == ["hermes", "qwen3_coder"]
    assert (table["tool_call_parsers"], table["reasoning_parsers"]) == (["hermes", "qwen3_coder"], ["qwen3"])
    assert table["env_vars"] == ["VLLM_LOGGING_LEVEL", "VLLM_OLD_KNOB"]


def test_sglang_field_layout_and_parser_registries(extractor: SimpleNamespace, tmp_path: Path) -> None:
    table = _table(extractor, "sglang", "0.0.1", _write_tree(tmp_path / "sglang", SGLANG_FILES))
    flags = table["flags"]
    assert flags["--tp-size"] == {
        "type": "int",
        "takes_value": "one",
        "aliases": ["--tensor-parallel-size"],
        "default": 1,
        "help": "The tensor parallelism size.",
    }
    assert flags["--mamba-radix-cache-strategy"]["choices"] == ["auto", "no_buffer"]
    assert flags["--mamba-scheduler-strategy"]["renamed_to"] == "--mamba-radix-cache-strategy"
    assert "--hidden" not in flags
    assert (table["tool_call_parsers"], table["reasoning_parsers"]) == (["llama3", "qwen25"], ["qwen3"])
    assert "SGLANG_ENABLE_SPEC_V2" in table["env_vars"]


def _sdist(path: Path, top: str, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = (textwrap.dedent(text) + NOT_IMPORTED).encode()
            member = tarfile.TarInfo(f"{top}/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def test_sdist_and_wheel_layouts_give_the_same_sources(extractor: SimpleNamespace, tmp_path: Path) -> None:
    files = {"vllm/envs.py": VLLM_FILES["vllm/envs.py"], "tests/vllm/envs.py": "X = 1\n"}
    sdist = _sdist(tmp_path / "vllm-0.0.1.tar.gz", "vllm-0.0.1", files)
    wheel = tmp_path / "vllm-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/envs.py", textwrap.dedent(VLLM_FILES["vllm/envs.py"]) + NOT_IMPORTED)
    from_sdist, from_wheel = (extractor.archive.Sources(path, "vllm") for path in (sdist, wheel))
    assert from_sdist.names == from_wheel.names == ["vllm/envs.py"]  # the sdist's tests/ left out
    assert from_sdist.text("vllm/envs.py") == from_wheel.text("vllm/envs.py")


def test_history_of_two_releases_answers_first_and_removed(
    extractor: SimpleNamespace, tmp_path: Path
) -> None:
    old = _table(extractor, "vllm", "0.1.0", _write_tree(tmp_path / "old", VLLM_FILES))
    newer_files = dict(VLLM_FILES)
    newer_files["vllm/envs.py"] = VLLM_FILES["vllm/envs.py"].replace("VLLM_OLD_KNOB", "VLLM_NEW_KNOB")
    newer_files["vllm/engine/arg_utils.py"] = VLLM_FILES["vllm/engine/arg_utils.py"].replace(
        'parser.add_argument("--swap-space", type=float, default=EngineArgs.swap_space)', ""
    )
    new = _table(extractor, "vllm", "0.2.0", _write_tree(tmp_path / "new", newer_files))
    document = extractor.history.pack("vllm", [new, old])
    path = tmp_path / "vllm.json"
    extractor.history.write_history(path, document)
    read_back = extractor.history.read_history(path)
    assert extractor.history.unpack(read_back) == [old, new]  # lossless, oldest first
    history = EngineHistory("vllm", read_back)
    assert history.releases == ("0.1.0", "0.2.0")
    swap = history.flag("--swap-space")
    assert swap is not None and (swap.last, swap.removed_in) == ("0.1.0", "0.2.0")
    knob = history.env_var("VLLM_NEW_KNOB")
    assert knob is not None and knob.first == "0.2.0"
    table = history.table("0.1.5")
    assert (table.version, table.match) == ("0.1.0", "between")
    assert table.lookup("--swap_space") is not None


def test_release_file_prefers_the_sdist_then_a_pure_wheel(extractor: SimpleNamespace) -> None:
    def entry(filename: str, kind: str, size: int, yanked: bool = False) -> dict[str, object]:
        return {
            "filename": filename,
            "packagetype": kind,
            "size": size,
            "url": f"https://files.example/{filename}",
            "digests": {"sha256": "0" * 64},
            "yanked": yanked,
        }

    wheels = [
        entry("x-1-cp311-cp311-manylinux_2_34_aarch64.whl", "bdist_wheel", 10),
        entry("x-1-cp311-cp311-manylinux_2_34_x86_64.whl", "bdist_wheel", 30),
    ]
    choose = extractor.releases.choose_file
    assert choose("1", [*wheels, entry("x-1.tar.gz", "sdist", 50)]).filename == "x-1.tar.gz"
    assert choose("1", wheels).filename.endswith("x86_64.whl")
    pure = entry("x-1-py3-none-any.whl", "bdist_wheel", 90)
    assert choose("1", [*wheels, pure]).filename == "x-1-py3-none-any.whl"
    assert choose("1", [entry("x-1.tar.gz", "sdist", 50, yanked=True)]) is None
