"""Synthetic prompts with exact input lengths: random, and shared prefixes for prefix caching.

Lengths are counted as the engine counts them (chat template or special tokens included), so the
requested length is what ``usage.prompt_tokens`` should say. Same seed, same prompts.

Usage::

    counter = LocalTokenizer.from_directory(Path("/models/qwen3"))
    prompts = random_prompts(counter, num_prompts=100, input_tokens=512, output_tokens=128, seed=0)
    prompts = shared_prefix_prompts(counter, num_prefixes=4, suffixes_per_prefix=8,
                                    prefix_tokens=1024, suffix_tokens=64, output_tokens=64, seed=0)
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from modelyard.bench.datasets.exact_length import build_exact_text
from modelyard.bench.datasets.tokenizer import TokenCounter
from modelyard.bench.records import BenchPrompt, EndpointKind
from modelyard.errors import InvalidInput

logger = logging.getLogger(__name__)


def _prompt_counter(counter: TokenCounter, endpoint: EndpointKind, prefix: str) -> Callable[[str], int]:
    if endpoint == "chat":
        return lambda body: counter.count_chat([{"role": "user", "content": prefix + body}])
    return lambda body: counter.count_text(prefix + body)


def _make_prompt(
    prompt_id: str,
    text: str,
    endpoint: EndpointKind,
    output_tokens: int,
    requested: int,
    achieved: int,
    source: str,
) -> BenchPrompt:
    return BenchPrompt(
        prompt_id=prompt_id,
        max_output_tokens=output_tokens,
        messages=[{"role": "user", "content": text}] if endpoint == "chat" else None,
        prompt_text=text if endpoint == "completions" else None,
        requested_input_tokens=requested,
        achieved_input_tokens=achieved,
        source=source,
    )


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise InvalidInput(f"{name} must be at least 1, got {value}")


def random_prompts(
    counter: TokenCounter,
    *,
    num_prompts: int,
    input_tokens: int,
    output_tokens: int,
    seed: int = 0,
    endpoint: EndpointKind = "chat",
    input_range_ratio: float = 0.0,
) -> list[BenchPrompt]:
    """Prompts of random words, each exactly ``input_tokens`` long as the engine counts it (or drawn
    uniformly within ``input_tokens * (1 +- input_range_ratio)``)."""
    _check_positive("the number of prompts", num_prompts)
    _check_positive("input_tokens", input_tokens)
    _check_positive("output_tokens", output_tokens)
    if not 0.0 <= input_range_ratio < 1.0:
        raise InvalidInput(f"input_range_ratio must be in [0, 1), got {input_range_ratio}")
    rng = random.Random(seed)
    words = counter.word_pool()
    count = _prompt_counter(counter, endpoint, "")
    empty_count = count("")
    low = max(1, round(input_tokens * (1.0 - input_range_ratio)))
    high = round(input_tokens * (1.0 + input_range_ratio))
    prompts: list[BenchPrompt] = []
    for index in range(num_prompts):
        target = rng.randint(low, high) if high > low else input_tokens
        built = build_exact_text(count, target, words, rng, empty_count=empty_count)
        prompts.append(
            _make_prompt(
                f"random-{seed}-{index}",
                built.body,
                endpoint,
                output_tokens,
                target,
                built.achieved_tokens,
                "random",
            )
        )
    _log_mismatches(prompts)
    return prompts


def shared_prefix_prompts(
    counter: TokenCounter,
    *,
    num_prefixes: int,
    suffixes_per_prefix: int,
    prefix_tokens: int,
    suffix_tokens: int,
    output_tokens: int,
    seed: int = 0,
    endpoint: EndpointKind = "chat",
    shuffle: bool = True,
) -> list[BenchPrompt]:
    """``num_prefixes`` distinct prefixes of ``prefix_tokens`` tokens, each followed by
    ``suffixes_per_prefix`` distinct suffixes adding exactly ``suffix_tokens`` tokens.

    The requested length of each prompt is the prefix's full count (template included) plus
    ``suffix_tokens``. With ``shuffle`` the prompts of different prefixes are interleaved, as a
    multi-tenant load would send them; without it they come grouped by prefix.
    """
    for name, value in (
        ("num_prefixes", num_prefixes),
        ("suffixes_per_prefix", suffixes_per_prefix),
        ("prefix_tokens", prefix_tokens),
        ("suffix_tokens", suffix_tokens),
        ("output_tokens", output_tokens),
    ):
        _check_positive(name, value)
    rng = random.Random(seed)
    words = counter.word_pool()
    prompts: list[BenchPrompt] = []
    for prefix_index in range(num_prefixes):
        prefix = build_exact_text(counter.count_plain, prefix_tokens, words, rng, empty_count=0).body
        count = _prompt_counter(counter, endpoint, prefix)
        prefix_count = count("")
        target = prefix_count + suffix_tokens
        for suffix_index in range(suffixes_per_prefix):
            built = build_exact_text(count, target, words, rng, empty_count=prefix_count)
            prompts.append(
                _make_prompt(
                    f"prefix-{seed}-{prefix_index}-{suffix_index}",
                    prefix + built.body,
                    endpoint,
                    output_tokens,
                    target,
                    built.achieved_tokens,
                    f"shared-prefix:{prefix_index}",
                )
            )
    if shuffle:
        rng.shuffle(prompts)
    _log_mismatches(prompts)
    return prompts


def _log_mismatches(prompts: list[BenchPrompt]) -> None:
    missed = [p for p in prompts if p.achieved_input_tokens != p.requested_input_tokens]
    if missed:
        logger.warning(
            "%d of %d prompts could not be built to their exact length (e.g. %s: %s tokens for %s asked)",
            len(missed),
            len(prompts),
            missed[0].prompt_id,
            missed[0].achieved_input_tokens,
            missed[0].requested_input_tokens,
        )
