"""Prefix-aware routing: requests whose prompts begin alike go to the same replica.

Engines keep the KV cache of prompts they have seen (vLLM's automatic prefix caching, SGLang's
radix cache); a request whose prompt starts like an earlier one on the same replica skips that
part of the prefill, so its first token comes sooner. Across replicas, nothing is shared.

The key is the conversation's opening, at most ``prefix_characters`` characters of it (about a
quarter as many tokens; the gateway does not tokenize), hashed with BLAKE2b so that every worker
process computes the same number. The opening is the prompt's text up to and including its first
user message: the system prompt (or instructions) and the first question, which every later
turn of the conversation repeats unchanged. Each replica's rank for a key is a hash of the key
and the replica's address (rendezvous hashing): every worker ranks the replicas alike without
talking to each other, and a replica that leaves moves only its own keys.
``ReplicaBalancer.choose_by_prefix`` takes the first in rank whose load is within the bound
(consistent hashing with bounded load).

Every turn of one conversation therefore has the same key from its first turn on, however short
its messages: turn 2 adds the answer and a new question after the opening, never inside it. (A
key that took the first ``prefix_characters`` characters of the whole history would change with
each turn until the history grew past that length.) Conversations that open alike (one long
system prompt shared by an application's users, cut at ``prefix_characters``) share a key, as
they share the engine's cached blocks; the load bound spreads them when one replica has too many.

The text: chat ``messages`` (role and text of each, in order, up to the first user message; text
parts of multi-part contents), ``system`` and ``messages`` (Anthropic), ``instructions`` and
``input`` (Responses API; a list of messages is read as ``messages``), ``prompt`` (completions: a
text prompt has no turns to tell apart, so its first ``prefix_characters`` characters).
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


def _messages(payload: dict[str, Any]) -> list[Any] | None:
    """The request's conversation: chat or Anthropic ``messages``, or a Responses ``input`` list."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        return messages
    value = payload.get("input")
    if isinstance(value, list) and any(isinstance(item, dict) and "role" in item for item in value):
        return value
    return None


def prompt_prefix(payload: dict[str, Any], characters: int) -> str:
    """The conversation's opening (the prompt's text through its first user message), at most
    ``characters`` characters of it ("" when the request has no prompt text)."""
    parts: list[str] = []
    for name in ("system", "instructions"):
        if name in payload:
            _content_text(payload[name], parts)
    messages = _messages(payload)
    for message in messages or ():
        if isinstance(message, dict):
            role = message.get("role")
            parts.append(role if isinstance(role, str) else "")
            _content_text(message.get("content"), parts)
            if role == "user":
                break  # the opening ends here: later turns add after it
        if sum(len(part) for part in parts) >= characters:
            break
    for name in ("prompt",) if messages is not None else ("prompt", "input"):
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
