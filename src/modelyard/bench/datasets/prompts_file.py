"""Prompts saved to a JSON-lines file and replayed, so that two engines get identical work.

The first line is a header (``{"format": "modelyard-prompts", "version": 1, ...}``), then one
``BenchPrompt`` per line.

Usage::

    save_prompts(prompts, Path("work.jsonl"), description="random 512/128 seed 0")
    same = load_prompts(Path("work.jsonl"))
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from modelyard.bench.records import BenchPrompt
from modelyard.errors import InvalidInput, NotFound

FORMAT_NAME = "modelyard-prompts"
FORMAT_VERSION = 1
_PROMPT_ADAPTER: TypeAdapter[BenchPrompt] = TypeAdapter(BenchPrompt)


def save_prompts(prompts: list[BenchPrompt], path: Path, *, description: str = "") -> None:
    """Write the prompts (creating parent folders); an existing file is replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "count": len(prompts),
        "description": description,
    }
    lines = [json.dumps(header)]
    lines.extend(json.dumps(dataclasses.asdict(prompt), ensure_ascii=False) for prompt in prompts)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_prompts(path: Path) -> list[BenchPrompt]:
    """Read a file written by ``save_prompts``; raises with the line number on a bad line."""
    if not path.is_file():
        raise NotFound(f"no prompts file at {path}", hint="write one with `modelyard bench prompts`")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise InvalidInput(f"{path} is empty; expected a modelyard prompts file")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{path} line 1 is not JSON: {error.msg}") from error
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise InvalidInput(
            f"{path} is not a modelyard prompts file (line 1 should be a header with format {FORMAT_NAME!r})"
        )
    if header.get("version") != FORMAT_VERSION:
        raise InvalidInput(
            f"{path} has prompts format version {header.get('version')!r}; expected {FORMAT_VERSION}"
        )
    prompts: list[BenchPrompt] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            prompts.append(_PROMPT_ADAPTER.validate_json(line))
        except ValidationError as error:
            raise InvalidInput(f"{path} line {number} is not a prompt: {error.errors()[0]['msg']}") from error
    if header.get("count") not in (None, len(prompts)):
        raise InvalidInput(
            f"{path} says it holds {header['count']} prompts but has {len(prompts)}: truncated?"
        )
    return prompts
