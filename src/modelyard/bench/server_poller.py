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

import logging
import time
from collections.abc import Callable
from types import TracebackType

import httpx

from modelyard.bench.records import TimelineSeries
from modelyard.bench.sampling import PeriodicSampling
from modelyard.bench.server_metrics import ServerTimeline, detect_flavor, parse_metrics_text

logger = logging.getLogger(__name__)


class ServerMetricsPoller:
    """Polls ``/metrics`` every ``interval_s`` (``sampling.PeriodicSampling``) until stopped. A failed
    poll is counted and logged once, never raised: the engine's view is an addition to the run, not
    a condition of it.
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
        self._timeout_s = timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._sampling = PeriodicSampling(
            self._poll_once, interval_s=interval_s, name="server-metrics-poller", clock_ns=clock_ns
        )

    async def __aenter__(self) -> ServerMetricsPoller:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Take the first sample now (the baseline for every delta), then keep polling."""
        self._client = httpx.AsyncClient(timeout=self._timeout_s, transport=self._transport)
        await self._sampling.start()

    async def stop(self) -> ServerTimeline:
        """Take a last sample (the end of the window) and stop."""
        await self._sampling.stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        return self._timeline

    def timeline(self) -> ServerTimeline:
        return self._timeline

    async def _poll_once(self, elapsed_s: float) -> None:
        client = self._client
        assert client is not None, "start() opens the client before the first poll"
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
