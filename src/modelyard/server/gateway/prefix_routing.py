"""Prefix-aware routing: requests whose prompts begin alike go to the same replica.

Engines keep the KV cache of prompts they have seen (vLLM's automatic prefix caching, SGLang's
radix cache); a request whose prompt starts like an earlier one on the same replica skips that
part of the prefill, so its first token comes sooner. Across replicas, nothing is shared.

The key is the first ``prefix_characters`` characters of the prompt's text (about a quarter as
many tokens; the gateway does not tokenize), hashed with BLAKE2b so that every worker process
computes the same number. Each replica's rank for a key is a hash of the key and the replica's
address (rendezvous hashing): every worker ranks the replicas alike without talking to each other,
and a replica that leaves moves only its own keys. ``ReplicaBalancer.choose_by_prefix`` takes the
first in rank whose load is within the bound (consistent hashing with bounded load).

Turns of one conversation share their beginning (system prompt, first messages), so once the
prompt is longer than ``prefix_characters`` every later turn goes to the same replica. A prompt
shorter than that is hashed whole, so its next turn may land elsewhere once.

The text: chat ``messages`` (role and text of each, in order; text parts of multi-part
contents), ``prompt`` (completions), ``instructions`` and ``input`` (Responses API), ``system`` and
``messages`` (Anthropic).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from modelyard.control.endpoints import Endpoint

_MASK = (1 << 64) - 1


def _stable_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix(value: int) -> int:
    """A 64-bit finalizer (splitmix64): spreads the combined key and replica hashes."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


_replica_seeds: dict[str, int] = {}


def _replica_seed(endpoint: Endpoint) -> int:
    seed = _replica_seeds.get(endpoint.base_url)
    if seed is None:
        seed = _replica_seeds[endpoint.base_url] = _stable_hash(endpoint.base_url.encode())
    return seed


def ranked_by_prefix(endpoints: Sequence[Endpoint], prefix_hash: int) -> list[Endpoint]:
    """The replicas in the order this prefix prefers them (the same in every process)."""
    return sorted(endpoints, key=lambda endpoint: _mix(prefix_hash ^ _replica_seed(endpoint)), reverse=True)


def _content_text(content: Any, parts: list[str]) -> None:
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for item in content:
            if isinstance(item, dict):
                text = item.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif "content" in item:
                    _content_text(item["content"], parts)
            elif isinstance(item, str):
                parts.append(item)


def prompt_prefix(payload: dict[str, Any], characters: int) -> str:
    """The first ``characters`` characters of the request's prompt text ("" when it has none)."""
    parts: list[str] = []
    for name in ("system", "instructions"):
        if name in payload:
            _content_text(payload[name], parts)
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                role = message.get("role")
                parts.append(role if isinstance(role, str) else "")
                _content_text(message.get("content"), parts)
            if sum(len(part) for part in parts) >= characters:
                break
    for name in ("prompt", "input"):
        value = payload.get(name)
        if isinstance(value, list) and value and all(isinstance(item, int) for item in value):
            parts.append(" ".join(str(item) for item in value[:characters]))
        elif value is not None:
            _content_text(value, parts)
    return "\x1f".join(parts)[:characters]


def prefix_hash(payload: dict[str, Any], characters: int) -> int | None:
    """The routing key of the request, or None when it has no prompt text."""
    text = prompt_prefix(payload, characters)
    if not text:
        return None
    return _stable_hash(text.encode("utf-8", errors="surrogatepass"))
