"""Pack the per-release tables of one engine into its history file, and unpack it again.

The history file (``src/modelyard/backends/flags/<engine>.json``) holds every release once:
``releases`` lists them oldest first with the archive each was read from; every flag, env var and
parser name carries the ranges of release indexes where it exists (``[[first, last], ...]``,
inclusive), and a flag one entry per distinct form (type, choices, default, aliases, ...)::

    {"format": 1, "engine": "vllm", "generated_by": "...",
     "releases": [["0.6.0", "vllm-0.6.0.tar.gz"], ...],
     "flags": {"--max-model-len": [[{"type": "int", ...}, [[0, 65]]]], ...},
     "env_vars": {"VLLM_LOGGING_LEVEL": [[0, 65]]},
     "deprecated_env_vars": {"SGLANG_ENABLE_SPEC_V2": [["has been removed ...", [[88, 92]]]]},
     "reasoning_parsers": {"qwen3": [[18, 65]]}, "tool_call_parsers": {...}}

``modelyard.backends.flag_tables`` reads it; ``unpack`` gives back each release's table, so a
refresh can add one release without reading the others' archives again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.version import Version

FORMAT = 1
Ranges = list[list[int]]
NAMED_SETS = ("env_vars", "reasoning_parsers", "tool_call_parsers")


def _ranges(indexes: list[int]) -> Ranges:
    """[0, 1, 2, 5] -> [[0, 2], [5, 5]]."""
    ranges: Ranges = []
    for index in sorted(indexes):
        if ranges and ranges[-1][1] == index - 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ranges


def _indexes(ranges: Ranges) -> list[int]:
    return [index for first, last in ranges for index in range(first, last + 1)]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def pack(engine: str, tables: list[dict[str, Any]]) -> dict[str, Any]:
    """One history document from per-release tables (any order; one per version)."""
    ordered = sorted(tables, key=lambda table: Version(table["version"]))
    flags: dict[str, dict[str, tuple[Any, list[int]]]] = {}
    named: dict[str, dict[str, list[int]]] = {kind: {} for kind in NAMED_SETS}
    deprecated: dict[str, dict[str, list[int]]] = {}
    for index, table in enumerate(ordered):
        for name, spec in table["flags"].items():
            flags.setdefault(name, {}).setdefault(_key(spec), (spec, []))[1].append(index)
        for kind in NAMED_SETS:
            for name in table[kind]:
                named[kind].setdefault(name, []).append(index)
        for name, note in table["deprecated_env_vars"].items():
            deprecated.setdefault(name, {}).setdefault(note, []).append(index)
    return {
        "format": FORMAT,
        "engine": engine,
        "generated_by": "scripts/extract_engine_flags.py",
        "releases": [[table["version"], table["source"]] for table in ordered],
        "flags": {
            name: [[spec, _ranges(indexes)] for spec, indexes in forms.values()]
            for name, forms in sorted(flags.items())
        },
        **{
            kind: {name: _ranges(indexes) for name, indexes in sorted(named[kind].items())}
            for kind in NAMED_SETS
        },
        "deprecated_env_vars": {
            name: [[note, _ranges(indexes)] for note, indexes in notes.items()]
            for name, notes in sorted(deprecated.items())
        },
    }


def unpack(history: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-release tables ``pack`` was given, oldest first."""
    tables: list[dict[str, Any]] = [
        {
            "version": version,
            "source": source,
            "flags": {},
            "env_vars": [],
            "reasoning_parsers": [],
            "tool_call_parsers": [],
            "deprecated_env_vars": {},
        }
        for version, source in history["releases"]
    ]
    for name, forms in history["flags"].items():
        for spec, ranges in forms:
            for index in _indexes(ranges):
                tables[index]["flags"][name] = spec
    for kind in NAMED_SETS:
        for name, ranges in history[kind].items():
            for index in _indexes(ranges):
                tables[index][kind].append(name)
    for name, notes in history["deprecated_env_vars"].items():
        for note, ranges in notes:
            for index in _indexes(ranges):
                tables[index]["deprecated_env_vars"][name] = note
    for table in tables:
        table["flags"] = dict(sorted(table["flags"].items()))
        for kind in NAMED_SETS:
            table[kind].sort()
    return tables


def read_history(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document if document.get("format") == FORMAT else None


def dumps(history: dict[str, Any]) -> str:
    """The history as JSON with one flag, variable or parser per line: small diffs in review."""
    lines = ["{"]
    keys = list(history)
    for position, key in enumerate(keys):
        value = history[key]
        comma = "," if position < len(keys) - 1 else ""
        if isinstance(value, dict) and value:
            entries = [
                f"{json.dumps(name, ensure_ascii=False)}: "
                f"{json.dumps(item, ensure_ascii=False, separators=(',', ':'))}"
                for name, item in value.items()
            ]
            lines.append(f"{json.dumps(key)}: {{")
            lines.append(",\n".join(entries))
            lines.append("}" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_history(path: Path, history: dict[str, Any]) -> int:
    """Write ``history`` (reproducibly: same tables, same bytes); its size in bytes."""
    data = dumps(history).encode("utf-8")
    path.write_bytes(data)
    return len(data)
