"""The pure parts of benchmarks/gateway_saturation.py: the balanced random labels, the bootstrap
over time blocks (a ratio of 1 for identical labels, a known 5 % slowdown caught, on a synthetic
closed loop whose engine drifts), and the completion tokens read from a stream's usage chunk."""

from __future__ import annotations

import asyncio
import importlib
import math
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def stats() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("saturation_stats")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def saturation() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("gateway_saturation")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_labels_stay_balanced_at_every_draw_and_come_in_random_order(stats: ModuleType) -> None:
    deck = stats.LabelDeck(stats.LABELS, random.Random(3))
    counts: Counter[str] = Counter()
    rounds = []
    for _ in range(1000):
        drawn = [deck.draw() for _ in range(3)]
        rounds.append(tuple(drawn))
        for label in drawn:
            counts[label] += 1
            assert max(counts.values()) - min(counts[name] for name in stats.LABELS) <= 1
    assert counts == dict.fromkeys(stats.LABELS, 1000)
    orders = Counter(rounds)
    assert len(orders) == 6  # every order of the three labels occurs
    assert all(120 < seen < 220 for seen in orders.values())  # about 1000 / 6 each
    firsts = Counter(order[0] for order in rounds)
    assert all(280 < firsts[label] < 390 for label in stats.LABELS)


def _closed_loop(stats: ModuleType, slowdown: dict[str, float], seed: int) -> list[Any]:
    """128 streams for 120 s against an engine whose speed drifts by +-30 % (a slow wave and
    noise from one block to the next); a request of label L lasts 2 s / speed x noise x slowdown[L]."""
    rng = random.Random(seed)
    deck = stats.LabelDeck(stats.LABELS, rng)
    speed_at = [1 + 0.3 * math.sin(second / 7) + rng.uniform(-0.1, 0.1) for second in range(130)]
    records = []
    for _stream in range(128):
        now = rng.uniform(0, 2)
        while now < 120:
            label = deck.draw()
            duration = 2.0 / speed_at[int(now)] * rng.lognormvariate(0, 0.2) * slowdown.get(label, 1.0)
            records.append(stats.RequestRecord(label, now, duration, duration * 0.2, 128))
            now += duration
    return records


def test_identical_labels_give_a_ratio_of_one_inside_a_narrow_interval(stats: ModuleType) -> None:
    records = _closed_loop(stats, {}, seed=11)
    for block_s in (1.0, 5.0):
        gateway = stats.compare(
            records, ("gateway",), ("direct-a", "direct-b"), block_s=block_s, window_s=120.0
        )
        control = stats.compare(records, ("direct-a",), ("direct-b",), block_s=block_s, window_s=120.0)
        for estimate in (gateway, control):
            assert estimate.contains(1.0), estimate
            assert estimate.high - estimate.low < 0.05, estimate  # 2,500 requests a label
            assert abs(estimate.ratio - 1) < 0.01


def test_a_five_percent_slowdown_of_one_label_is_caught(stats: ModuleType) -> None:
    records = _closed_loop(stats, {"gateway": 1.05}, seed=12)
    estimate = stats.compare(records, ("gateway",), ("direct-a", "direct-b"), block_s=1.0, window_s=120.0)
    assert estimate.contains(1 / 1.05), estimate
    assert estimate.high < 0.98  # the target's verdict: not met
    control = stats.compare(records, ("direct-a",), ("direct-b",), block_s=1.0, window_s=120.0)
    assert control.contains(1.0), control


def test_the_drift_cancels_in_the_ratio_but_not_in_the_rate(stats: ModuleType) -> None:
    records = _closed_loop(stats, {}, seed=13)
    early = [record for record in records if record.started_s < 10]
    late = [record for record in records if 20 <= record.started_s < 30]
    rate = [stats.label_figures(part, "gateway").tokens_per_stream_s for part in (early, late)]
    assert rate[0] / rate[1] > 1.2  # the engine was faster in the first seconds than at 20-30 s
    estimate = stats.compare(records, ("gateway",), ("direct-a",), block_s=1.0, window_s=120.0)
    assert estimate.contains(1.0)


def test_a_request_counts_in_the_block_it_started_in(stats: ModuleType) -> None:
    records = [
        stats.RequestRecord("gateway", 0.5, 3.0, 0.1, 10),
        stats.RequestRecord("direct-a", 1.0, 1.0, 0.1, 20),
        stats.RequestRecord("direct-b", 2.99, 0.5, 0.1, 30),
        stats.RequestRecord("direct-b", 3.0, 0.5, 0.1, 99),  # outside the window
        stats.RequestRecord("other", 1.0, 0.5, 0.1, 99),  # not a label of the comparison
    ]
    tokens, seconds = stats.block_totals(records, stats.LABELS, 1.0, 3.0)
    assert tokens.tolist() == [[10, 0, 0], [0, 20, 0], [0, 0, 30]]
    assert seconds.tolist() == [[3.0, 0, 0], [0, 1.0, 0], [0, 0, 0.5]]


def test_figures_per_label_are_tokens_per_second_of_its_requests(stats: ModuleType) -> None:
    records = [stats.RequestRecord("gateway", 0.0, 2.0, ttft, 100) for ttft in (0.1, 0.2, 0.3, 0.4)]
    figures = stats.label_figures(records, "gateway")
    assert figures.requests == 4 and figures.tokens_per_stream_s == 50.0
    assert figures.ttft_p50_s == 0.3 and figures.ttft_p99_s == 0.4


def test_a_label_without_requests_is_named(stats: ModuleType) -> None:
    records = [stats.RequestRecord("gateway", 0.0, 2.0, 0.1, 100)]
    with pytest.raises(ValueError, match="no measured requests"):
        stats.compare(records, ("gateway",), ("direct-a",), block_s=1.0, window_s=10.0)


class TransportDouble:
    """The socket's side of a connection: a write makes the answer arrive, in the pieces given."""

    def __init__(self, connection: Any, pieces: list[bytes]) -> None:
        self.connection = connection
        self.pieces = pieces

    def write(self, data: bytes) -> None:
        for piece in self.pieces:
            asyncio.get_running_loop().call_soon(self.connection.data_received, piece)


async def test_the_completion_tokens_come_from_the_usage_chunk_even_split_in_pieces(
    saturation: ModuleType,
) -> None:
    body = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":128,"total_tokens":135}}\n\n'
        b"data: [DONE]\n\n"
    )
    response = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    for cut in (len(response) + body.index(b"completion") + 3, len(response) + body.index(b"128") + 2):
        connection = saturation.UsageConnection()
        connection.transport = TransportDouble(connection, [(response + body)[:cut], (response + body)[cut:]])
        status, _first_ns, _total_ns, events = await connection.exchange(b"request")
        assert (status, events, connection.completion_tokens) == (200, 3, 128)
