"""Conversations from a ShareGPT-format file: a JSON array or JSON lines of
``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``
(OpenAI-style ``{"messages": [{"role": "user", "content": ...}]}`` is read too).

The first user turn is the prompt. The output length is fixed (``output_tokens``) or, when it is
``None``, the length of the recorded answer counted with the tokenizer, as ``vllm bench serve``
does with the same file.

Usage::

    prompts = sharegpt_prompts(Path("ShareGPT_V3.json"), num_prompts=200, seed=0, counter=counter)
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from modelyard.bench.datasets.tokenizer import TokenCounter
from modelyard.bench.records import BenchPrompt, EndpointKind
from modelyard.errors import InvalidInput, NotFound

_USER_ROLES = {"human", "user"}
_ASSISTANT_ROLES = {"gpt", "chatgpt", "assistant", "bard", "bing"}
MIN_TOKENS = 4


def _not_sharegpt(path: Path, message: str, line: int) -> InvalidInput:
    return InvalidInput(
        f"{path} is not ShareGPT JSON or JSON lines: {message} at line {line}",
        hint="each record needs a 'conversations' list of {from, value} turns",
    )


def read_conversations(path: Path) -> list[list[tuple[str, str]]]:
    """Every conversation of the file as ``(role, text)`` turns, roles as written."""
    if not path.is_file():
        raise NotFound(f"no ShareGPT file at {path}", hint="give the path of a .json or .jsonl file")
    text = path.read_text(encoding="utf-8")
    records: list[Any] = []
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise _not_sharegpt(path, error.msg, error.lineno) from error
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise _not_sharegpt(path, error.msg, number) from error
    conversations: list[list[tuple[str, str]]] = []
    for record in records:
        if not isinstance(record, dict):
            continue
        turns = record.get("conversations") or record.get("conversation") or record.get("messages")
        if not isinstance(turns, list):
            continue
        parsed: list[tuple[str, str]] = []
        for turn in turns:
            if not isinstance(turn, dict):
                continue
            role = turn.get("from", turn.get("role"))
            value = turn.get("value", turn.get("content"))
            if isinstance(role, str) and isinstance(value, str):
                parsed.append((role.lower(), value))
        if parsed:
            conversations.append(parsed)
    return conversations


def _first_exchange(turns: list[tuple[str, str]]) -> tuple[str, str | None] | None:
    for position, (role, value) in enumerate(turns):
        if role in _USER_ROLES:
            answer = next((text for r, text in turns[position + 1 :] if r in _ASSISTANT_ROLES), None)
            return value, answer
    return None


def sharegpt_prompts(
    path: Path,
    *,
    num_prompts: int,
    seed: int = 0,
    output_tokens: int | None = None,
    counter: TokenCounter | None = None,
    endpoint: EndpointKind = "chat",
    max_input_tokens: int | None = None,
) -> list[BenchPrompt]:
    """``num_prompts`` prompts drawn from the file with ``seed``; when the file has fewer usable
    conversations the draw repeats them (with distinct prompt ids)."""
    if num_prompts < 1:
        raise InvalidInput(f"the number of prompts must be at least 1, got {num_prompts}")
    if output_tokens is None and counter is None:
        raise InvalidInput(
            "ShareGPT output lengths come from the recorded answers, which needs a tokenizer",
            hint="pass --tokenizer (or an engine with /tokenize), or fix --output-tokens",
        )
    candidates: list[tuple[int, str, int, int | None]] = []  # index, prompt, output tokens, input tokens
    for index, turns in enumerate(read_conversations(path)):
        exchange = _first_exchange(turns)
        if exchange is None or not exchange[0].strip():
            continue
        prompt, answer = exchange
        if output_tokens is not None:
            wanted_output = output_tokens
        elif answer is None or counter is None:
            continue
        else:
            wanted_output = counter.count_plain(answer)
            if wanted_output < MIN_TOKENS:
                continue
        candidates.append((index, prompt, wanted_output, None))
    if not candidates:
        raise InvalidInput(
            f"{path} holds no conversation with a user turn (and an answer, to size the output)"
        )
    rng = random.Random(seed)
    rng.shuffle(candidates)
    prompts: list[BenchPrompt] = []
    position = 0
    skipped = 0
    while len(prompts) < num_prompts and skipped < len(candidates):
        index, prompt, wanted_output, _ = candidates[position % len(candidates)]
        round_number = position // len(candidates)
        position += 1
        input_count: int | None = None
        if counter is not None:
            input_count = (
                counter.count_chat([{"role": "user", "content": prompt}])
                if endpoint == "chat"
                else counter.count_text(prompt)
            )
            if max_input_tokens is not None and input_count > max_input_tokens:
                skipped += 1
                continue
        prompts.append(
            BenchPrompt(
                prompt_id=f"sharegpt-{index}" + (f"-r{round_number}" if round_number else ""),
                max_output_tokens=wanted_output,
                messages=[{"role": "user", "content": prompt}] if endpoint == "chat" else None,
                prompt_text=prompt if endpoint == "completions" else None,
                requested_input_tokens=None,
                achieved_input_tokens=input_count,
                source=f"sharegpt:{path.name}",
            )
        )
    if not prompts:
        raise InvalidInput(f"every conversation in {path} is longer than max_input_tokens={max_input_tokens}")
    return prompts
