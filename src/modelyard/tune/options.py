"""``modelyard tune``'s flag values turned into the tune's types, each bad value a clear error.

parse_axis("default,64,256", int, option="--max-num-seqs")   # (None, 64, 256)
parse_duration_s("2h")                                        # 7200.0
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from modelyard.errors import InvalidInput

Value = TypeVar("Value")
DEFAULT_WORD = "default"
_DURATION = re.compile(r"^(?P<number>[0-9]*\.?[0-9]+)(?P<unit>s|m|h)?$")
_DURATION_S = {"s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")


def _parts(text: str, option: str, example: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise InvalidInput(f"{option} is empty", hint=f"{option} {example}")
    return parts


def parse_axis(
    text: str,
    convert: Callable[[str], Value],
    *,
    option: str,
    example: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Value | None, ...]:
    """Comma-separated values; ``default`` is the engine's default (the flag left out)."""
    values: list[Value | None] = []
    for part in _parts(text, option, example):
        if part.lower() == DEFAULT_WORD:
            values.append(None)
            continue
        try:
            value = convert(part)
        except ValueError as error:
            raise InvalidInput(
                f"{option} value {part!r} is not a {convert.__name__} or 'default'",
                hint=f"{option} {example}",
            ) from error
        if isinstance(value, int | float) and (
            (low is not None and value < low) or (high is not None and value > high)
        ):
            raise InvalidInput(
                f"{option} value {part} is not between {low:g} and {high:g}", hint=f"{option} {example}"
            )
        values.append(value)
    return tuple(dict.fromkeys(values))


def parse_layouts(text: str, *, option: str) -> tuple[int, ...]:
    """``--tp 1,2,4``: positive GPU counts (no ``default``: a layout is always given)."""
    layouts: list[int] = []
    for part in _parts(text, option, "1,2"):
        if not part.isdigit() or not 1 <= int(part) <= 64:
            raise InvalidInput(
                f"{option} value {part!r} is not a GPU count from 1 to 64", hint=f"{option} 1,2"
            )
        layouts.append(int(part))
    return tuple(dict.fromkeys(layouts))


def parse_kv_dtypes(text: str) -> tuple[str | None, ...]:
    values: list[str | None] = []
    for part in _parts(text, "--kv-cache-dtype", "default,fp8"):
        if part.lower() == DEFAULT_WORD:
            values.append(None)
        elif part in KV_CACHE_DTYPES:
            values.append(part)
        else:
            raise InvalidInput(
                f"--kv-cache-dtype value {part!r} is not one of default, {', '.join(KV_CACHE_DTYPES)}",
                hint="--kv-cache-dtype default,fp8",
            )
    return tuple(dict.fromkeys(values))


def parse_prefix_caching(text: str) -> tuple[bool | None, ...]:
    words = {"default": None, "on": True, "off": False}
    values: list[bool | None] = []
    for part in _parts(text, "--prefix-caching", "default,off"):
        if part.lower() not in words:
            raise InvalidInput(
                f"--prefix-caching value {part!r} is not default, on or off",
                hint="--prefix-caching default,off",
            )
        values.append(words[part.lower()])
    return tuple(dict.fromkeys(values))


def parse_duration_s(text: str) -> float:
    """``90s``, ``30m``, ``2h`` or plain seconds."""
    match = _DURATION.match(text.strip().lower())
    if match is None or float(match["number"]) <= 0:
        raise InvalidInput(f"--budget {text!r} is not a duration above 0", hint="--budget 45m (s, m or h)")
    return float(match["number"]) * _DURATION_S[match["unit"]]


def parse_gpu_ids(text: str) -> list[int]:
    parts = _parts(text, "--gpu-ids", "0,1")
    if not all(part.isdigit() for part in parts):
        raise InvalidInput(
            f"--gpu-ids takes GPU indices, got {text!r}", hint="--gpu-ids 0,1 (see `modelyard gpus`)"
        )
    return [int(part) for part in parts]


def parse_versions(items: list[str]) -> dict[str, list[str]]:
    """``--version vllm=0.25.0 --version vllm=0.24.0`` -> {backend: [versions]}."""
    versions: dict[str, list[str]] = {}
    for item in items:
        backend, separator, version = item.partition("=")
        if not separator or not backend.strip() or not version.strip():
            raise InvalidInput(
                f"--version {item!r} is not BACKEND=VERSION",
                hint="--version vllm=0.25.0 --version sglang=0.5.17",
            )
        versions.setdefault(backend.strip(), []).append(version.strip())
    return versions


def split_engine_arguments(
    items: list[str], scopes: set[str]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """``--args``: the items for every candidate, and the ``BACKEND:PARAMETERS`` ones, whose
    prefix names a backend (or engine family) of the tune, for that engine's candidates only."""
    common: list[str] = []
    scoped: list[tuple[str, str]] = []
    for item in items:
        scope, colon, rest = item.partition(":")
        if colon and scope.strip() in scopes:
            if not rest.strip():
                raise InvalidInput(
                    f"--args {item!r} gives {scope.strip()} no parameters",
                    hint="--args 'sglang:--context-length 8192'",
                )
            scoped.append((scope.strip(), rest.strip()))
        else:
            common.append(item)
    return tuple(common), tuple(scoped)
