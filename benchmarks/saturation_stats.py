"""The pure parts of ``gateway_saturation.py``: which label each request takes, and the ratios of
the labels' throughput with intervals from a bootstrap over time blocks.

- ``LabelDeck``: labels at random, in shuffled rounds (each round holds every label once), so the
  labels stay balanced at every moment of a run and no label owns a stretch of time.
- ``RequestRecord``: one measured request (its label, when it started in the measured window,
  how long it took, its time to first token, its completion tokens).
- ``block_totals``: completion tokens and request-seconds per time block and label (a request
  counts in the block where it started).
- ``compare``: the throughput of some labels against others (output tokens per stream-second
  spent on their requests: sum of tokens / sum of durations), with a percentile interval from a
  bootstrap that resamples whole time blocks. Concurrent requests share the engine's batches, so
  requests are not independent; blocks of a second or more, with every label inside each, are
  nearly so (what the engine does at a moment hits every label in that block alike).

    deck = LabelDeck(LABELS, random.Random(1))
    label = deck.draw()
    estimate = compare(records, ("gateway",), ("direct-a", "direct-b"), block_s=1.0, window_s=60.0)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

LABELS = ("gateway", "direct-a", "direct-b")


class LabelDeck:
    """Random labels, balanced: each round of ``len(labels)`` draws holds every label once, in a
    shuffled order, so after any number of draws the counts of two labels differ by at most one."""

    def __init__(self, labels: Sequence[str], rng: random.Random) -> None:
        if not labels:
            raise ValueError("a deck needs at least one label")
        self._labels = list(labels)
        self._rng = rng
        self._round: list[str] = []

    def draw(self) -> str:
        if not self._round:
            self._round = list(self._labels)
            self._rng.shuffle(self._round)
        return self._round.pop()


@dataclass(frozen=True)
class RequestRecord:
    label: str
    started_s: float  # since the start of the measured window
    duration_s: float
    ttft_s: float
    completion_tokens: int


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float
    low: float
    high: float
    block_s: float
    blocks: int
    samples: int

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


FloatArray = npt.NDArray[np.float64]


def block_totals(
    records: Sequence[RequestRecord], labels: Sequence[str], block_s: float, window_s: float
) -> tuple[FloatArray, FloatArray]:
    """(tokens, seconds), each blocks x labels: completion tokens and request durations summed by
    the block a request started in. Requests outside [0, window_s) or of other labels are left out."""
    if block_s <= 0 or window_s <= 0:
        raise ValueError(f"block_s and window_s must be positive, got {block_s} and {window_s}")
    blocks = max(1, int(np.ceil(window_s / block_s - 1e-9)))
    column = {label: index for index, label in enumerate(labels)}
    tokens = np.zeros((blocks, len(labels)))
    seconds = np.zeros((blocks, len(labels)))
    for record in records:
        index = column.get(record.label)
        if index is None or not 0 <= record.started_s < window_s:
            continue
        block = min(int(record.started_s // block_s), blocks - 1)
        tokens[block, index] += record.completion_tokens
        seconds[block, index] += record.duration_s
    return tokens, seconds


def _columns(labels: Sequence[str], chosen: Sequence[str]) -> list[int]:
    missing = [label for label in chosen if label not in labels]
    if missing:
        raise ValueError(f"labels {missing} are not among {list(labels)}")
    return [labels.index(label) for label in chosen]


def rate_ratio(
    tokens: FloatArray, seconds: FloatArray, numerator: list[int], denominator: list[int]
) -> float:
    """(tokens / seconds of the numerator's columns) / (the same of the denominator's), pooled."""
    top = tokens[:, numerator].sum() / seconds[:, numerator].sum()
    bottom = tokens[:, denominator].sum() / seconds[:, denominator].sum()
    return float(top / bottom)


def bootstrap_ratios(
    tokens: FloatArray,
    seconds: FloatArray,
    numerator: list[int],
    denominator: list[int],
    samples: int,
    rng: np.random.Generator,
) -> FloatArray:
    """The ratio in ``samples`` resamplings of whole blocks (with replacement)."""
    blocks = tokens.shape[0]
    picks = rng.integers(0, blocks, size=(samples, blocks))
    top_tokens = tokens[:, numerator].sum(axis=1)[picks].sum(axis=1)
    top_seconds = seconds[:, numerator].sum(axis=1)[picks].sum(axis=1)
    bottom_tokens = tokens[:, denominator].sum(axis=1)[picks].sum(axis=1)
    bottom_seconds = seconds[:, denominator].sum(axis=1)[picks].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios: FloatArray = (top_tokens / top_seconds) / (bottom_tokens / bottom_seconds)
    return ratios[np.isfinite(ratios)]


def compare(
    records: Sequence[RequestRecord],
    numerator: Sequence[str],
    denominator: Sequence[str],
    *,
    block_s: float,
    window_s: float,
    labels: Sequence[str] = LABELS,
    samples: int = 4000,
    seed: int = 0,
    confidence: float = 0.95,
) -> RatioEstimate:
    """Throughput per stream of ``numerator``'s requests over ``denominator``'s, with the
    ``confidence`` interval of a bootstrap over time blocks of ``block_s``."""
    tokens, seconds = block_totals(records, labels, block_s, window_s)
    top, bottom = _columns(labels, numerator), _columns(labels, denominator)
    if seconds[:, top].sum() <= 0 or seconds[:, bottom].sum() <= 0:
        raise ValueError(f"no measured requests for {list(numerator)} or {list(denominator)}")
    ratio = rate_ratio(tokens, seconds, top, bottom)
    ratios = bootstrap_ratios(tokens, seconds, top, bottom, samples, np.random.default_rng(seed))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return RatioEstimate(ratio, float(low), float(high), block_s, tokens.shape[0], samples)


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted values (nearest rank; nan when there are none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(frozen=True)
class LabelFigures:
    label: str
    requests: int
    completion_tokens: int
    request_seconds: float
    tokens_per_stream_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    duration_mean_s: float


def label_figures(records: Sequence[RequestRecord], label: str) -> LabelFigures:
    chosen = [record for record in records if record.label == label]
    tokens = sum(record.completion_tokens for record in chosen)
    seconds = sum(record.duration_s for record in chosen)
    ttfts = [record.ttft_s for record in chosen]
    return LabelFigures(
        label=label,
        requests=len(chosen),
        completion_tokens=tokens,
        request_seconds=seconds,
        tokens_per_stream_s=tokens / seconds if seconds > 0 else float("nan"),
        ttft_p50_s=nearest_rank(ttfts, 0.5),
        ttft_p99_s=nearest_rank(ttfts, 0.99),
        duration_mean_s=seconds / len(chosen) if chosen else float("nan"),
    )
