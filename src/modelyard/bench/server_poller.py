"""Polling an engine's ``/metrics`` while a load runs, into a ``ServerTimeline``.

Usage::

    async with ServerMetricsPoller("http://127.0.0.1:8000/metrics", interval_s=1.0) as poller:
        ...  # run the load
    timeline = poller.timeline()
    print(timeline.flavor, timeline.prefix_cache_hit_ratio(), timeline.server_ttft_mean_ms())

    # with the benchmark runner: one poller per load point, stored as TimelineSeries
    run_benchmark(config, observer_factories=[lambda: ServerMetricsObserver(metrics_url_for(url))])
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType

import httpx

from modelyard.bench.records import TimelineSeries
from modelyard.bench.server_metrics import ServerTimeline, detect_flavor, parse_metrics_text

logger = logging.getLogger(__name__)


class ServerMetricsPoller:
    """Polls ``/metrics`` every ``interval_s`` on its own task until stopped. A failed poll is counted
    and logged once, never raised: the engine's view is an addition to the run, not a condition of it.
    """

    def __init__(
        self,
        metrics_url: str,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 5.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeline = ServerTimeline(metrics_url=metrics_url)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock_ns = clock_ns
        self._transport = transport
        self._start_ns = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def __aenter__(self) -> ServerMetricsPoller:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Take the first sample now (the baseline for every delta), then keep polling."""
        self._start_ns = self._clock_ns()
        self._stop.clear()
        self._task = asyncio.create_task(self._run(), name="server-metrics-poller")

    async def stop(self) -> ServerTimeline:
        """Take a last sample (the end of the window) and stop."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        return self._timeline

    def timeline(self) -> ServerTimeline:
        return self._timeline

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=self._timeout_s, transport=self._transport) as client:
            await self._poll_once(client)
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=self._interval_s)
                await self._poll_once(client)

    async def _poll_once(self, client: httpx.AsyncClient) -> None:
        elapsed_s = (self._clock_ns() - self._start_ns) / 1e9
        try:
            response = await client.get(self._timeline.metrics_url)
            response.raise_for_status()
            text = response.text
            if self._timeline.flavor == "unknown":
                self._timeline.flavor = detect_flavor(text)
            sample = parse_metrics_text(text, elapsed_s, self._timeline.flavor)
        except (httpx.HTTPError, ValueError) as error:
            if self._timeline.failed_polls == 0:
                logger.warning("polling %s failed: %s", self._timeline.metrics_url, error)
            self._timeline.failed_polls += 1
            self._timeline.last_error = f"{type(error).__name__}: {error}"
            return
        self._timeline.samples.append(sample)


class ServerMetricsObserver:
    """The runner's ``PointObserver`` for ``/metrics``: one poller per load point, its samples
    returned as ``TimelineSeries``.

        factories = [lambda: ServerMetricsObserver(metrics_url_for(base_url))]
        run_benchmark(config, observer_factories=factories)
    """

    def __init__(self, metrics_url: str, *, interval_s: float = 1.0) -> None:
        self._poller = ServerMetricsPoller(metrics_url, interval_s=interval_s)

    async def start(self) -> None:
        await self._poller.start()

    async def stop(self) -> list[TimelineSeries]:
        timeline = await self._poller.stop()
        return timeline.to_series()
