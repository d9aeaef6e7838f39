"""The autoscaler beside the controller in the server: its loop, fed the gateway's TTFT histograms.

``ttft_source(context)`` gives the loop a deployment's time-to-first-token histogram as every
gateway process counted it (the workers' latest snapshots summed, as ``/metrics`` shows them
under ``modelyard_gateway_time_to_first_token_seconds``), summed over keys and made cumulative.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from modelyard.bench.server_metrics import HistogramSnapshot
from modelyard.control.autoscale.loop import AutoscaleLoop
from modelyard.control.autoscale.signals import TtftSource
from modelyard.server.context import ServerContext
from modelyard.server.metrics.gateway_counts import LATENCY_BUCKETS_S


def ttft_source(context: ServerContext) -> TtftSource:
    def read(deployment_name: str) -> HistogramSnapshot | None:
        gateway = context.gateway
        if gateway is None:
            return None
        histograms = [
            histogram
            for (deployment, _key), histogram in gateway.gateway_counts().ttft.items()
            if deployment == deployment_name
        ]
        if not histograms:
            return None
        counts = [
            sum(histogram.counts[index] for histogram in histograms)
            for index in range(len(LATENCY_BUCKETS_S) + 1)
        ]
        cumulative = list(accumulate(counts))
        return HistogramSnapshot(
            upper_bounds_s=[*LATENCY_BUCKETS_S, float("inf")],
            cumulative_counts=[float(count) for count in cumulative],
            sum_s=sum(histogram.total for histogram in histograms),
            count=float(cumulative[-1]),
        )

    return read


async def start_autoscaler(context: ServerContext, poke: Callable[[], None]) -> AutoscaleLoop:
    loop = AutoscaleLoop(
        database=context.database, endpoints=context.endpoints, poke=poke, ttft_source=ttft_source(context)
    )
    await loop.start()
    context.autoscaler = loop
    return loop
