"""What a gateway process counts about its requests, cheaply, to be exported by ``/metrics``.

Counting happens on the request path (a latency observation per relayed chunk), so these are
plain Python containers: an observation is a bisect and a list increment (about 0.3 µs), where
prometheus-client's own histogram costs 1.5 µs and its multiprocess mode 4.9 µs. Each gateway
worker sends ``snapshot()`` (cumulative, JSON) to the main process every second; the main
process adds the workers' snapshots (``merge_snapshots``) and renders them with
prometheus-client (``collectors.py``).

Label values are bounded: ``deployment`` is a known deployment name or ``""`` (requests refused
before one was found), ``key`` an API key's name or ``""`` (no valid key); never a raw value a
client sent.

Usage::

    counts = GatewayCounts()
    counts.request_started("demo")
    counts.first_byte("demo", "team-a", 0.021)
    observe_gap = counts.itl_observer("demo")     # per chunk: observe_gap(seconds)
    counts.request_finished("demo", "team-a", "/v1/chat/completions", 200, None, 1.2, usage)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# Time to first token and end to end: 1 ms to 2 min.
LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
# Between two relayed chunks: 0.5 ms to 5 s.
ITL_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.0)
# A garbage collection's pause: 50 µs to 1 s.
GC_PAUSE_BUCKETS_S = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


class Histogram:
    """Bucket counts (``le`` upper bounds, the last one +Inf, not cumulative) and a sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def to_json(self) -> list[Any]:
        return [self.counts, self.total]

    def add_json(self, data: list[Any]) -> None:
        counts, total = data
        for index, count in enumerate(counts):
            self.counts[index] += count
        self.total += total


RequestLabels = tuple[str, str, str, str]  # deployment, key, path, status
ErrorLabels = tuple[str, str, str, str]  # deployment, key, status, code
KeyLabels = tuple[str, str]  # deployment, key


@dataclass
class GatewayCounts:
    """Counters and histograms of one gateway process (or the sum of several)."""

    requests: dict[RequestLabels, int] = field(default_factory=dict)
    errors: dict[ErrorLabels, int] = field(default_factory=dict)
    prompt_tokens: dict[KeyLabels, int] = field(default_factory=dict)
    completion_tokens: dict[KeyLabels, int] = field(default_factory=dict)
    ttft: dict[KeyLabels, Histogram] = field(default_factory=dict)
    e2e: dict[KeyLabels, Histogram] = field(default_factory=dict)
    itl: dict[str, Histogram] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    gc_pauses: Histogram = field(default_factory=lambda: Histogram(GC_PAUSE_BUCKETS_S))

    # -- on the request path ---------------------------------------------------------------------

    def request_started(self, deployment: str) -> None:
        self.in_flight[deployment] = self.in_flight.get(deployment, 0) + 1

    def first_byte(self, deployment: str, key: str, seconds: float) -> None:
        histogram = self.ttft.get((deployment, key))
        if histogram is None:
            histogram = self.ttft[(deployment, key)] = Histogram(LATENCY_BUCKETS_S)
        histogram.observe(seconds)

    def itl_observer(self, deployment: str) -> Callable[[float], None]:
        """The ``observe`` of this deployment's inter-chunk histogram (bound once per request)."""
        histogram = self.itl.get(deployment)
        if histogram is None:
            histogram = self.itl[deployment] = Histogram(ITL_BUCKETS_S)
        return histogram.observe

    def request_finished(
        self,
        deployment: str,
        key: str,
        path: str,
        status: int,
        code: str | None,
        seconds: float,
        tokens: tuple[int, int] | None,
        *,
        started: bool = True,
    ) -> None:
        """One request ended (``started``: it had been counted in flight)."""
        if started:
            remaining = self.in_flight.get(deployment, 0) - 1
            self.in_flight[deployment] = max(remaining, 0)
        status_text = str(status)
        labels = (deployment, key, path, status_text)
        self.requests[labels] = self.requests.get(labels, 0) + 1
        if status >= 400:
            error_labels = (deployment, key, status_text, code or "")
            self.errors[error_labels] = self.errors.get(error_labels, 0) + 1
        key_labels = (deployment, key)
        if started:
            histogram = self.e2e.get(key_labels)
            if histogram is None:
                histogram = self.e2e[key_labels] = Histogram(LATENCY_BUCKETS_S)
            histogram.observe(seconds)
        if tokens is not None:
            self.prompt_tokens[key_labels] = self.prompt_tokens.get(key_labels, 0) + tokens[0]
            self.completion_tokens[key_labels] = self.completion_tokens.get(key_labels, 0) + tokens[1]

    # -- between processes -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything, cumulative, as JSON-able lists."""
        return {
            "requests": [[*labels, value] for labels, value in self.requests.items()],
            "errors": [[*labels, value] for labels, value in self.errors.items()],
            "prompt_tokens": [[*labels, value] for labels, value in self.prompt_tokens.items()],
            "completion_tokens": [[*labels, value] for labels, value in self.completion_tokens.items()],
            "ttft": [[*labels, histogram.to_json()] for labels, histogram in self.ttft.items()],
            "e2e": [[*labels, histogram.to_json()] for labels, histogram in self.e2e.items()],
            "itl": [[labels, histogram.to_json()] for labels, histogram in self.itl.items()],
            "in_flight": [[labels, value] for labels, value in self.in_flight.items()],
            "gc_pauses": self.gc_pauses.to_json(),
        }

    def add_snapshot(self, snapshot: dict[str, Any], *, live: bool = True) -> None:
        """Add another process's ``snapshot()`` (``live``: count its requests in flight too)."""
        for name in ("requests", "errors", "prompt_tokens", "completion_tokens"):
            target: dict[Any, int] = getattr(self, name)
            for *labels, value in snapshot.get(name, []):
                key = tuple(labels)
                target[key] = target.get(key, 0) + value
        for name, bounds in (("ttft", LATENCY_BUCKETS_S), ("e2e", LATENCY_BUCKETS_S)):
            histograms: dict[Any, Histogram] = getattr(self, name)
            for *labels, data in snapshot.get(name, []):
                key = tuple(labels)
                histogram = histograms.get(key)
                if histogram is None:
                    histogram = histograms[key] = Histogram(bounds)
                histogram.add_json(data)
        for deployment, data in snapshot.get("itl", []):
            histogram = self.itl.get(deployment)
            if histogram is None:
                histogram = self.itl[deployment] = Histogram(ITL_BUCKETS_S)
            histogram.add_json(data)
        if live:
            for deployment, value in snapshot.get("in_flight", []):
                self.in_flight[deployment] = self.in_flight.get(deployment, 0) + value
        if "gc_pauses" in snapshot:
            self.gc_pauses.add_json(snapshot["gc_pauses"])


def merge_snapshots(live: Iterable[dict[str, Any]], retired: Iterable[dict[str, Any]] = ()) -> GatewayCounts:
    """The sum of running workers' snapshots and of the last ones of workers that exited."""
    total = GatewayCounts()
    for snapshot in live:
        total.add_snapshot(snapshot)
    for snapshot in retired:
        total.add_snapshot(snapshot, live=False)
    return total
