"""Text with an exact token count, as the engine will count it.

Random token ids decoded to text do not re-encode to the same number of tokens (merges across the
joins), which is why other tools report "about N tokens". Here a prompt is built from whole words
that are one token each, its full count (special tokens or chat template included) is measured,
and the word count is searched until the measured count equals the target. When no word sequence
lands exactly (a tokenizer that merges across spaces), the closest count below is kept and the
caller reports achieved against requested.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from modelyard.errors import InvalidInput

# Bounds the tokenizer calls per prompt; a typical prompt needs two.
MAX_COUNT_CALLS = 80


@dataclass(frozen=True)
class ExactText:
    body: str
    """The generated text (it starts with a space: each word carries its leading space)."""
    achieved_tokens: int
    """The full prompt's count with this body, measured with the counting function."""


def build_exact_text(
    count: Callable[[str], int],
    target_tokens: int,
    words: Sequence[str],
    rng: random.Random,
    *,
    empty_count: int | None = None,
) -> ExactText:
    """Find a body of random ``words`` such that ``count(body) == target_tokens``.

    ``count`` measures the whole prompt built around the body (template, prefix, special tokens);
    ``empty_count`` is ``count("")`` when the caller already knows it (it is the same for every
    prompt of a set). Raises ``InvalidInput`` when the target is below what an empty body costs.
    """
    if not words:
        raise InvalidInput("no words to build prompts from", hint="use a tokenizer with a vocabulary")
    base = count("") if empty_count is None else empty_count
    if target_tokens < base:
        raise InvalidInput(
            f"an input length of {target_tokens} tokens is shorter than the prompt's fixed part"
            f" ({base} tokens: chat template, special tokens or shared prefix)",
            hint=f"ask for at least {base} input tokens, or use --endpoint completions",
        )
    if target_tokens == base:
        return ExactText(body="", achieved_tokens=base)
    calls = 0
    chosen: list[str] = [rng.choice(words) for _ in range(target_tokens - base)]

    def measure(length: int) -> int:
        nonlocal calls
        calls += 1
        return count("".join(chosen[:length]))

    # One word, one token: the first guess is usually exact.
    low_length, low_count = 0, base
    length = len(chosen)
    measured = measure(length)
    while measured < target_tokens and calls < MAX_COUNT_CALLS:  # words merged: add more
        low_length, low_count = length, measured
        chosen.extend(rng.choice(words) for _ in range(target_tokens - measured))
        length = len(chosen)
        measured = measure(length)
    if measured == target_tokens:
        return ExactText(body="".join(chosen[:length]), achieved_tokens=measured)
    high_length = length
    # Bisect for the longest word prefix that stays within the target.
    while high_length - low_length > 1 and calls < MAX_COUNT_CALLS:
        middle = (low_length + high_length) // 2
        middle_count = measure(middle)
        if middle_count == target_tokens:
            return ExactText(body="".join(chosen[:middle]), achieved_tokens=middle_count)
        if middle_count < target_tokens:
            low_length, low_count = middle, middle_count
        else:
            high_length = middle
    # The next word overshoots: close the gap with other words, one at a time.
    body = "".join(chosen[:low_length])
    best = ExactText(body=body, achieved_tokens=low_count)
    while best.achieved_tokens < target_tokens and calls < MAX_COUNT_CALLS:
        candidate = best.body + rng.choice(words)
        calls += 1
        candidate_count = count(candidate)
        if candidate_count <= target_tokens:
            best = ExactText(body=candidate, achieved_tokens=candidate_count)
    return best
