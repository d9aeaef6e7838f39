"""The autoscaler beside the controller in the server: its loop, fed the gateway's TTFT histograms.

``activity_source(context)``: the deployment's requests answered and in flight, from the same
counts (scale to zero's idleness); ``wake_autoscaler``: what a held request's ``ReplicaWanted``
becomes in the main process.

``ttft_source(context)`` gives the loop a deployment's time-to-first-token histogram as every
gateway process counted it (the workers' latest snapshots summed, as ``/metrics`` shows them
under ``modelyard_gateway_time_to_first_token_seconds``), summed over keys and made cumulative.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from modelyard.bench.server_metrics import HistogramSnapshot
from modelyard.control.autoscale.loop import AutoscaleLoop
from modelyard.control.autoscale.signals import ActivitySource, TtftSource
from modelyard.server.context import ServerContext
from modelyard.server.metrics.gateway_counts import LATENCY_BUCKETS_S, GatewayCounts, Histogram


def ttft_snapshot(counts: GatewayCounts, deployment_name: str) -> HistogramSnapshot | None:
    """The deployment's TTFT histogram over all its keys, cumulative; None: no request yet."""
    merged, found = Histogram(LATENCY_BUCKETS_S), False
    for (deployment, _key), histogram in counts.ttft.items():
        if deployment == deployment_name:
            merged.add_json(histogram.to_json())
            found = True
    if not found:
        return None
    cumulative = list(accumulate(merged.counts))
    return HistogramSnapshot(
        upper_bounds_s=[*LATENCY_BUCKETS_S, float("inf")],
        cumulative_counts=[float(count) for count in cumulative],
        sum_s=merged.total,
        count=float(cumulative[-1]),
    )


def activity_of(counts: GatewayCounts, deployment_name: str) -> tuple[int, int] | None:
    """The deployment's requests answered so far and in flight now, as the gateway counted them
    (every worker); None: none yet."""
    answered = sum(value for labels, value in counts.requests.items() if labels[0] == deployment_name)
    in_flight = counts.in_flight.get(deployment_name, 0)
    if not answered and not in_flight:
        return None
    return answered, in_flight


def activity_source(context: ServerContext) -> ActivitySource:
    def read(deployment_name: str) -> tuple[int, int] | None:
        gateway = context.gateway
        return None if gateway is None else activity_of(gateway.gateway_counts(), deployment_name)

    return read


def wake_autoscaler(context: ServerContext, deployment_name: str) -> None:
    """A gateway process holds a request for ``deployment_name`` (scaled to zero): start a replica."""
    if context.autoscaler is not None:
        context.autoscaler.wake(deployment_name)


def ttft_source(context: ServerContext) -> TtftSource:
    def read(deployment_name: str) -> HistogramSnapshot | None:
        gateway = context.gateway
        return None if gateway is None else ttft_snapshot(gateway.gateway_counts(), deployment_name)

    return read


async def start_autoscaler(context: ServerContext, poke: Callable[[], None]) -> AutoscaleLoop:
    loop = AutoscaleLoop(
        database=context.database,
        endpoints=context.endpoints,
        poke=poke,
        ttft_source=ttft_source(context),
        activity_source=activity_source(context),
    )
    await loop.start()
    context.autoscaler = loop
    return loop
