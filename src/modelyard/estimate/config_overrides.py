"""The model config an engine sees: config.json with the command line's overrides on top.

vLLM takes ``--hf-overrides JSON`` (and, in older releases, ``--rope-scaling JSON``); SGLang
takes ``--json-model-override-args JSON``. The official recipes use them to stretch a model's
positions with YaRN (``--rope-scaling '{"rope_type":"yarn","factor":4.0,
"original_max_position_embeddings":32768}' --max-model-len 131072``), so the checks of the
context length and the estimator read the overridden config, not the file.

``context_length_of(config)`` is the length the engines derive when no length is given: the
smallest of the length keys, times the rope factor where the scaling extends the positions.

Usage::

    text = overridden_text_config(model.text_config, "vllm", parsed)
    length, key = context_length_of(text)
"""

from __future__ import annotations

import json
from typing import Any

from modelyard.backends.parameters import ParsedParameters

# Flags whose value is a JSON object merged over config.json, per engine.
OVERRIDE_FLAGS = {
    "vllm": ("--hf-overrides",),
    "sglang": ("--json-model-override-args",),
}
# Keys the engines read as the model's length, in the order vLLM's _get_and_verify_max_len does.
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# Rope scalings whose factor does not extend max_position_embeddings (it already counts them).
_NO_EXTENSION_ROPE = {"su", "longrope", "llama3", "mrope", "default"}


def _json_object(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def command_overrides(engine: str, parsed: ParsedParameters) -> dict[str, Any]:
    """The config keys the command line sets (one dict; later flags win)."""
    overrides: dict[str, Any] = {}
    for flag in OVERRIDE_FLAGS.get(engine, ()):
        for option in parsed.find_all(flag):
            value = _json_object(option.values[-1] if option.values else None)
            if value is not None:
                overrides = _merge(overrides, value)
    if engine == "vllm":
        rope = _json_object(parsed.value_of("--rope-scaling"))
        if rope is not None:
            overrides["rope_scaling"] = rope
    return overrides


def overridden_text_config(
    text_config: dict[str, Any], engine: str, parsed: ParsedParameters
) -> dict[str, Any]:
    """``text_config`` with the command line's overrides merged in (a nested ``text_config`` of the
    override applies to it as well)."""
    overrides = command_overrides(engine, parsed)
    if not overrides:
        return text_config
    nested = overrides.pop("text_config", None)
    merged = _merge(text_config, overrides)
    if isinstance(nested, dict):
        merged = _merge(merged, nested)
    return merged


def context_length_of(config: dict[str, Any]) -> tuple[int, str] | None:
    """(length, key) an engine derives from ``config``: the smallest length key, times the rope
    scaling factor where the scaling extends the positions (yarn, linear, dynamic)."""
    present = [
        (value, key)
        for key in LENGTH_KEYS
        if isinstance(value := config.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    if not present:
        return None
    length, key = min(present)
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(scaling, dict):
        kind = str(scaling.get("rope_type") or scaling.get("type") or "default").lower()
        factor = scaling.get("factor")
        if kind not in _NO_EXTENSION_ROPE and isinstance(factor, (int, float)) and factor > 1:
            original = scaling.get("original_max_position_embeddings")
            base = original if isinstance(original, int) and kind == "yarn" else length
            return int(base * factor), f"{key} x rope_scaling factor {factor:g}"
    return length, key
