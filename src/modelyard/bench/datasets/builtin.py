"""A small conversational set written for modelyard (``data/conversations.json``): 50 prompts
from one-line questions to long requests, in categories (short, explain, write, code, plan,
reason, long, multi). No download, so it works on machines with no internet.

Usage::

    prompts = builtin_prompts(num_prompts=100, output_tokens=128, seed=0, counter=counter)
"""

from __future__ import annotations

import json
import random
from functools import cache
from importlib import resources
from typing import Any

from modelyard.bench.datasets.tokenizer import TokenCounter
from modelyard.bench.records import BenchPrompt, EndpointKind
from modelyard.errors import InvalidInput


@cache
def builtin_conversations() -> tuple[dict[str, Any], ...]:
    """The shipped prompts: ``{"id", "category", "messages"}`` each."""
    text = resources.files("modelyard.bench.datasets").joinpath("data/conversations.json").read_text("utf-8")
    return tuple(json.loads(text)["prompts"])


def builtin_prompts(
    *,
    num_prompts: int,
    output_tokens: int,
    seed: int = 0,
    counter: TokenCounter | None = None,
    endpoint: EndpointKind = "chat",
) -> list[BenchPrompt]:
    """``num_prompts`` prompts in an order drawn from ``seed``; beyond 50 the set repeats
    (in a new order each round, with distinct prompt ids)."""
    if num_prompts < 1 or output_tokens < 1:
        raise InvalidInput(
            f"num_prompts and output_tokens must be at least 1, got {num_prompts}, {output_tokens}"
        )
    rng = random.Random(seed)
    conversations = builtin_conversations()
    prompts: list[BenchPrompt] = []
    round_number = 0
    while len(prompts) < num_prompts:
        order = list(conversations)
        rng.shuffle(order)
        for conversation in order[: num_prompts - len(prompts)]:
            messages = [dict(message) for message in conversation["messages"]]
            text = "\n".join(message["content"] for message in messages)
            achieved: int | None = None
            if counter is not None:
                achieved = counter.count_chat(messages) if endpoint == "chat" else counter.count_text(text)
            prompts.append(
                BenchPrompt(
                    prompt_id=conversation["id"] + (f"-r{round_number}" if round_number else ""),
                    max_output_tokens=output_tokens,
                    messages=messages if endpoint == "chat" else None,
                    prompt_text=text if endpoint == "completions" else None,
                    achieved_input_tokens=achieved,
                    source="builtin",
                )
            )
        round_number += 1
    return prompts
