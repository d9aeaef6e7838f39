"""Fixed output lengths: which request fields ask an engine for exactly N output tokens.

- vLLM and SGLang: ``ignore_eos``, their extension that keeps generating past the
  end-of-sequence token, so every request produces ``max_tokens`` tokens.
- transformers serve (5.17 to 5.24 at least) has no ``ignore_eos`` but takes a whole
  ``generation_config`` (a JSON string) per request; ``eos_token_id: -1`` turns the stop token
  off, in continuous batching and in plain ``generate`` alike. That config replaces the model's
  own, so sampling falls back to greedy decoding for these requests.
- Any engine we cannot identify gets only ``max_tokens``: its outputs may end early, and the
  results report the lengths it really produced (from ``usage``).

Usage::

    body.update(output_length_fields("vllm", 128))  # {"max_tokens": 128, "ignore_eos": True}
"""

from __future__ import annotations

import json
from typing import Any

ENGINES_ACCEPTING_IGNORE_EOS = frozenset({"vllm", "sglang"})
ENGINES_ACCEPTING_GENERATION_CONFIG = frozenset({"transformers"})


def engine_accepts_ignore_eos(engine: str | None) -> bool:
    """True for vLLM and SGLang; False for transformers serve and anything unknown."""
    return engine is not None and engine.lower() in ENGINES_ACCEPTING_IGNORE_EOS


def output_length_fields(
    engine: str | None, max_output_tokens: int, *, ignore_eos: bool = True
) -> dict[str, Any]:
    """The request-body fields that bound (and, where the engine can, fix) the output length."""
    fields: dict[str, Any] = {"max_tokens": max_output_tokens}
    if not ignore_eos or engine is None:
        return fields
    if engine_accepts_ignore_eos(engine):
        fields["ignore_eos"] = True
    elif engine.lower() in ENGINES_ACCEPTING_GENERATION_CONFIG:
        fields["generation_config"] = json.dumps({"eos_token_id": -1, "max_new_tokens": max_output_tokens})
    return fields
