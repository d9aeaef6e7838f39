"""Write the engine flag tables in ``src/modelyard/backends/flags/`` from the real engine wheels.

Usage::

    python scripts/extract_engine_flags.py            # VERSIONS, plus the newest release of each
    python scripts/extract_engine_flags.py --engine sglang --version 0.5.23

Each wheel is fetched once with ``pip download --no-deps`` into ``.cache/wheels`` (git-ignored)
and read with ``ast``; nothing from a wheel is ever imported or executed. What is read:

- vLLM: the config dataclasses (``vllm/config/*.py`` and the frontend ``*Args`` classes), turned
  into flags the way ``vllm.engine.arg_utils.get_kwargs`` does (bool fields get ``--no-`` forms,
  ``Literal`` fields get choices, dataclass and dict fields take JSON), plus every explicit
  ``add_argument`` in ``EngineArgs.add_cli_args`` and ``make_arg_parser``;
- SGLang: every ``add_argument`` in ``server_args.py`` and ``arg_groups/``, and the
  ``A[type, Arg(...)]`` fields that ``add_cli_args_from_dataclass`` registers (0.5.17 and later);
- the reasoning-parser and tool-call-parser names each version registers;
- the environment variables each version reads, and those it only warns about as removed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine_flags.common import Flag, Sources
from engine_flags.environment import environment_variables
from engine_flags.sglang_source import sglang_flags, sglang_parser_names
from engine_flags.vllm_source import VllmExtractor, vllm_parser_names

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
WHEEL_CACHE = REPOSITORY_ROOT / ".cache" / "wheels"
OUTPUT_DIRECTORY = REPOSITORY_ROOT / "src" / "modelyard" / "backends" / "flags"
VERSIONS: dict[str, list[str]] = {
    "vllm": ["0.19.1", "0.25.0", "0.33.0"],
    "sglang": ["0.5.10.post1", "0.5.17", "0.5.18", "0.5.21", "0.5.23"],
}


# ----------------------------------------------------------------------------- wheels


def wheel_path(engine: str, version: str) -> Path:
    """Download (once) and return the wheel of ``engine==version``."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    (WHEEL_CACHE.parent / ".gitignore").write_text("*\n")
    found = sorted(WHEEL_CACHE.glob(f"{engine}-{version}-*.whl"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["-d", str(WHEEL_CACHE), f"{engine}=={version}"]
        subprocess.run(command, check=True)
        found = sorted(WHEEL_CACHE.glob(f"{engine}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel for {engine}=={version} in {WHEEL_CACHE}")
    return found[0]


# ----------------------------------------------------------------------------- tables


def takes_json(flag: Flag) -> bool:
    """String flags whose value is parsed as JSON (``--json-model-override-args '{}'``)."""
    return flag.default in ("{}", "[]") or flag.name.startswith("--json-") or "JSON string" in flag.help


def build_table(engine: str, version: str) -> dict[str, Any]:
    wheel = wheel_path(engine, version)
    sources = Sources(wheel)
    if engine == "vllm":
        flags = VllmExtractor(sources).extract()
        reasoning = vllm_parser_names(sources, "reasoning", "_REASONING_PARSERS_TO_REGISTER")
        tools = vllm_parser_names(sources, "tool_parsers", "_TOOL_PARSERS_TO_REGISTER")
        if not tools:
            tools = vllm_parser_names(sources, "entrypoints/openai/tool_parsers", "_TOOL_PARSERS_TO_REGISTER")
    else:
        flags = sglang_flags(sources)
        reasoning = sglang_parser_names(sources, "REASONING_PARSER_NAMES", "DetectorMap")
        tools = sglang_parser_names(sources, "TOOL_CALL_PARSER_NAMES", "ToolCallParserEnum")
    for flag_name, names in (("--reasoning-parser", reasoning), ("--tool-call-parser", tools)):
        if flag_name in flags and names:
            known = (flags[flag_name].choices or []) + flags[flag_name].choice_constants
            keep = [value for value in known if value in {"auto", "none"}]
            flags[flag_name].choices = keep + names
            flags[flag_name].type = "str"
    for flag in flags.values():
        if flag.type == "str" and flag.takes_value == "one" and takes_json(flag):
            flag.type = "json"
    env_read, env_deprecated = environment_variables(sources, engine)
    return {
        "engine": engine,
        "version": version,
        "source": wheel.name,
        "generated_by": "scripts/extract_engine_flags.py",
        "flags": {name: flags[name].to_json() for name in sorted(flags)},
        "reasoning_parsers": reasoning,
        "tool_call_parsers": tools,
        "env_vars": env_read,
        "deprecated_env_vars": env_deprecated,
    }


def newest_version(engine: str) -> str | None:
    """The newest release on the package index (``pip index versions``), None when unreachable."""
    command = [sys.executable, "-m", "pip", "index", "versions", engine]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    except (subprocess.SubprocessError, OSError) as error:
        sys.stderr.write(f"cannot ask the package index for the newest {engine}: {error}\n")
        return None
    match = re.search(rf"^{engine} \(([^)]+)\)", result.stdout, re.MULTILINE)
    return match.group(1) if match else None


def iter_targets(engine: str | None, version: str | None, newest: bool) -> Iterator[tuple[str, str]]:
    if engine and version:
        yield engine, version
        return
    for name, versions in VERSIONS.items():
        if engine and name != engine:
            continue
        latest = newest_version(name) if newest else None
        for candidate in versions + ([latest] if latest and latest not in versions else []):
            yield name, candidate


def compact_json(table: dict[str, Any]) -> str:
    """One flag per line: small files whose diffs between versions read well."""
    lines = ["{"]
    for key, value in table.items():
        if key == "flags":
            lines.append('"flags": {')
            entries = [
                f"{json.dumps(name)}: {json.dumps(flag, ensure_ascii=False)}" for name, flag in value.items()
            ]
            lines.append(",\n".join(entries))
            lines.append("},")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines[-1] = lines[-1].rstrip(",")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=sorted(VERSIONS))
    parser.add_argument("--version", help="one version of --engine (default: VERSIONS and the newest)")
    parser.add_argument(
        "--pinned-only", action="store_true", help="skip asking the package index for the newest release"
    )
    arguments = parser.parse_args()
    OUTPUT_DIRECTORY.mkdir(parents=True, exist_ok=True)
    for engine, version in iter_targets(arguments.engine, arguments.version, not arguments.pinned_only):
        table = build_table(engine, version)
        path = OUTPUT_DIRECTORY / f"{engine}-{version}.json"
        path.write_text(compact_json(table))
        sys.stdout.write(
            f"{path.relative_to(REPOSITORY_ROOT)}: {len(table['flags'])} flags, "
            f"{len(table['reasoning_parsers'])} reasoning parsers, "
            f"{len(table['tool_call_parsers'])} tool-call parsers, "
            f"{len(table['env_vars'])} env vars\n"
        )


if __name__ == "__main__":
    main()
