"""The signals the autoscaler follows, read where they are: each ready replica's own ``/metrics``
(vLLM and SGLang names, through ``bench/server_metrics.py``'s one mapping) and the gateway's
time-to-first-token histogram of the deployment.

- ``waiting_per_replica``: ``vllm:num_requests_waiting`` (``sglang:num_queue_reqs``) summed
  over the replicas that answered, divided by how many answered;
- ``kv_cache_use``: ``vllm:kv_cache_usage_perc`` (``sglang:token_usage``), the mean of those;
- ``ttft_p90_ms``: the p90 of the gateway's TTFT histogram (every worker's) over the last
  ``ttft_window_seconds``; 0 when no request came in it.

A replica whose page cannot be read counts for nothing (neither its waiting requests nor its
share); none answering is no reading (``None``), which a stabilisation window does not span.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from modelyard.bench.server_metrics import HistogramSnapshot, ServerMetricsSample, parse_metrics_text
from modelyard.control.autoscale.config import AutoscaleMetric
from modelyard.control.endpoints import Endpoint
from modelyard.control.engine_metrics_page import read_metrics_page

logger = logging.getLogger(__name__)

# The gateway's cumulative TTFT histogram of a deployment (all keys, all workers); None: none yet.
TtftSource = Callable[[str], HistogramSnapshot | None]
# The gateway's counts of a deployment's requests (answered so far, in flight now; every worker),
# None: none yet. A change, or any in flight, is a request: scale to zero waits for idle_s without.
ActivitySource = Callable[[str], tuple[int, int] | None]


@dataclass(frozen=True)
class EngineReadings:
    """What the ready replicas' pages said at one instant."""

    answered: int
    waiting_requests: float
    kv_cache_use_mean: float | None

    def waiting_per_replica(self) -> float | None:
        return self.waiting_requests / self.answered if self.answered else None


async def _page(client: httpx.AsyncClient, endpoint: Endpoint) -> ServerMetricsSample | None:
    text = await read_metrics_page(client, endpoint)
    if text is None:
        return None
    try:
        return parse_metrics_text(text, elapsed_s=0.0)
    except ValueError as error:
        logger.info("autoscale: the metrics of %s are not Prometheus text: %s", endpoint.base_url, error)
        return None


async def read_engines(client: httpx.AsyncClient, endpoints: list[Endpoint]) -> EngineReadings:
    pages = await asyncio.gather(*(_page(client, endpoint) for endpoint in endpoints))
    answered = [page for page in pages if page is not None and page.waiting_requests is not None]
    usage = [page.kv_cache_usage_ratio for page in answered if page.kv_cache_usage_ratio is not None]
    return EngineReadings(
        answered=len(answered),
        waiting_requests=sum(page.waiting_requests or 0.0 for page in answered),
        kv_cache_use_mean=sum(usage) / len(usage) if usage else None,
    )


class TtftWindow:
    """The p90 of the TTFTs the gateway saw in the last ``window_s``, from its cumulative
    histogram read at each sample."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._snapshots: deque[tuple[float, HistogramSnapshot]] = deque()

    def p90_ms(self, now_s: float, cumulative: HistogramSnapshot | None) -> float | None:
        """None at the first reading (the histogram holds every request since the gateway
        started, not the window's); 0 when no request came in the window."""
        if cumulative is None:
            return 0.0
        self._snapshots.append((now_s, cumulative))
        while len(self._snapshots) > 2 and self._snapshots[1][0] <= now_s - self._window_s:
            self._snapshots.popleft()
        if len(self._snapshots) < 2:
            return None
        quantile_s = cumulative.minus(self._snapshots[0][1]).quantile_s(0.9)
        return 0.0 if quantile_s is None else quantile_s * 1000.0


def signal_value(
    metric: AutoscaleMetric,
    readings: EngineReadings,
    ttft: TtftWindow,
    now_s: float,
    source: TtftSource | None,
    name: str,
) -> float | None:
    """The deployment's signal for ``metric`` now (None: no reading)."""
    if metric == "waiting_per_replica":
        return readings.waiting_per_replica()
    if metric == "kv_cache_use":
        return readings.kv_cache_use_mean
    return ttft.p90_ms(now_s, source(name) if source is not None else None)
