"""Reasoning text under both names: ``reasoning_content`` (DeepSeek, SGLang, transformers serve)
and ``reasoning`` (vLLM >= 0.10), whichever one the engine used.

Clients written for either engine then read the gateway without changes. Only called on events
and bodies whose bytes contain ``"reasoning`` (see ``streaming.py``), so the common content-only
chunk is never parsed.
"""

from __future__ import annotations

from typing import Any

REASONING_FIELDS = ("reasoning_content", "reasoning")

# What an event or body must contain before it is worth parsing for reasoning.
REASONING_MARKER = b'"reasoning'


def mirror_reasoning(part: dict[str, Any]) -> bool:
    """Copy a non-null reasoning field to the other name, in a delta or a message.

    Returns whether ``part`` changed. When both names carry text, they are left as they are.
    """
    content = part.get("reasoning_content")
    reasoning = part.get("reasoning")
    if content is not None and reasoning is None:
        part["reasoning"] = content
        return True
    if reasoning is not None and content is None:
        part["reasoning_content"] = reasoning
        return True
    return False


def normalise_reasoning(payload: dict[str, Any]) -> bool:
    """Mirror reasoning in every choice's ``delta`` (streamed) or ``message`` (not streamed)."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return False
    changed = False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        for key in ("delta", "message"):
            part = choice.get(key)
            if isinstance(part, dict) and mirror_reasoning(part):
                changed = True
    return changed
