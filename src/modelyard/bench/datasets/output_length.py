"""Fixed output lengths: which request fields ask an engine for exactly N output tokens.

``ignore_eos`` is a vLLM and SGLang extension that keeps generating past the end-of-sequence
token, so every request produces ``max_tokens`` tokens. transformers serve refuses unknown
fields with HTTP 422, so it is never sent there, nor to an engine we cannot identify.

Usage::

    body.update(output_length_fields("vllm", 128))  # {"max_tokens": 128, "ignore_eos": True}
"""

from __future__ import annotations

from typing import Any

ENGINES_ACCEPTING_IGNORE_EOS = frozenset({"vllm", "sglang"})


def engine_accepts_ignore_eos(engine: str | None) -> bool:
    """True for vLLM and SGLang; False for transformers serve and anything unknown."""
    return engine is not None and engine.lower() in ENGINES_ACCEPTING_IGNORE_EOS


def output_length_fields(
    engine: str | None, max_output_tokens: int, *, ignore_eos: bool = True
) -> dict[str, Any]:
    """The request-body fields that bound (and, where the engine can, fix) the output length."""
    fields: dict[str, Any] = {"max_tokens": max_output_tokens}
    if ignore_eos and engine_accepts_ignore_eos(engine):
        fields["ignore_eos"] = True
    return fields
