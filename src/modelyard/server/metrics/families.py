"""The metric families ``/metrics`` exports, built from plain data at scrape time.

Each function turns one source into prometheus-client ``Metric`` families (rendered together by
``route.py``): the gateway's counts, the controller's instances (from the store), the GPUs (from
the controller's last NVML reading). Label names avoid Prometheus's own target labels
(``instance``, ``job``): an engine replica is ``instance_id``, a GPU host is ``worker``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from sqlalchemy import select

from modelyard.control.booking_check import BookingMeasurement
from modelyard.hardware.gpus import GpuInfo
from modelyard.server.metrics.gateway_counts import GatewayCounts, Histogram
from modelyard.store.database import Database
from modelyard.store.tables import Deployment, Instance

PREFIX = "modelyard"


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    cumulative = 0
    out = []
    for bound, count in zip([*histogram.bounds, float("inf")], histogram.counts, strict=True):
        cumulative += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(cumulative)))
    return out


def _histogram(
    name: str, documentation: str, labels: list[str], items: Iterable[tuple[tuple[str, ...], Histogram]]
) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, histogram in items:
        family.add_metric(list(values), _buckets(histogram), histogram.total)
    return family


def gateway_families(counts: GatewayCounts, requests_by_worker: dict[str, int]) -> list[Metric]:
    """Requests, errors, tokens, latencies and requests in flight, per deployment and key name."""
    requests = CounterMetricFamily(
        f"{PREFIX}_gateway_requests",
        "Requests the gateway answered, by the status the client got.",
        labels=["deployment", "key", "path", "status"],
    )
    for labels, value in sorted(counts.requests.items()):
        requests.add_metric(list(labels), value)
    errors = CounterMetricFamily(
        f"{PREFIX}_gateway_errors",
        "Answers with a status of 400 or more, by status and the gateway's error code.",
        labels=["deployment", "key", "status", "code"],
    )
    for labels, value in sorted(counts.errors.items()):
        errors.add_metric(list(labels), value)
    prompt = CounterMetricFamily(
        f"{PREFIX}_gateway_prompt_tokens",
        "Prompt tokens, as the engines reported them.",
        labels=["deployment", "key"],
    )
    for key_labels, value in sorted(counts.prompt_tokens.items()):
        prompt.add_metric(list(key_labels), value)
    completion = CounterMetricFamily(
        f"{PREFIX}_gateway_completion_tokens",
        "Completion tokens, as the engines reported them.",
        labels=["deployment", "key"],
    )
    for key_labels, value in sorted(counts.completion_tokens.items()):
        completion.add_metric(list(key_labels), value)
    in_flight = GaugeMetricFamily(
        f"{PREFIX}_gateway_requests_in_flight", "Requests being answered now.", labels=["deployment"]
    )
    for deployment, value in sorted(counts.in_flight.items()):
        in_flight.add_metric([deployment], value)
    by_worker = CounterMetricFamily(
        f"{PREFIX}_gateway_worker_requests",
        "Requests answered by each gateway worker process (how evenly the kernel spreads connections).",
        labels=["worker"],
    )
    for worker, value in sorted(requests_by_worker.items()):
        by_worker.add_metric([worker], value)
    return [
        requests,
        errors,
        prompt,
        completion,
        in_flight,
        by_worker,
        _histogram(
            f"{PREFIX}_gateway_time_to_first_token_seconds",
            "From the request's arrival to the first streamed bytes sent to the client.",
            ["deployment", "key"],
            sorted(counts.ttft.items()),
        ),
        _histogram(
            f"{PREFIX}_gateway_inter_token_latency_seconds",
            "Between two streamed pieces sent to the client.",
            ["deployment"],
            [((name,), histogram) for name, histogram in sorted(counts.itl.items())],
        ),
        _histogram(
            f"{PREFIX}_gateway_request_duration_seconds",
            "From the request's arrival to the end of its answer.",
            ["deployment", "key"],
            sorted(counts.e2e.items()),
        ),
        _histogram(
            f"{PREFIX}_gateway_gc_pause_seconds",
            "Garbage-collection pauses in the gateway processes.",
            [],
            [((), counts.gc_pauses)],
        ),
    ]


@dataclass(frozen=True)
class InstanceFacts:
    deployment: str
    instance_id: int
    replica_index: int
    state: str
    restart_count: int
    started_at: datetime | None
    ready_at: datetime | None


def read_instances(database: Database) -> list[InstanceFacts]:
    """Every instance's state and timings (blocking: call in a worker thread)."""
    with database.session() as session:
        rows = session.execute(
            select(
                Deployment.name,
                Instance.id,
                Instance.replica_index,
                Instance.state,
                Instance.restart_count,
                Instance.started_at,
                Instance.ready_at,
            ).join(Deployment, Instance.deployment_id == Deployment.id)
        ).all()
    return [InstanceFacts(*row) for row in rows]


def controller_families(instances: list[InstanceFacts]) -> list[Metric]:
    """Instances by state, restarts, and the time the current start took to reach running."""
    by_state = GaugeMetricFamily(
        f"{PREFIX}_instances",
        "Instances (replicas) of each deployment, by state.",
        labels=["deployment", "state"],
    )
    counted: dict[tuple[str, str], int] = {}
    for facts in instances:
        counted[(facts.deployment, facts.state)] = counted.get((facts.deployment, facts.state), 0) + 1
    for (deployment, state), count in sorted(counted.items()):
        by_state.add_metric([deployment, state], count)
    labels = ["deployment", "instance_id", "replica"]
    restarts = GaugeMetricFamily(
        f"{PREFIX}_instance_restarts", "Restarts of each instance since it was created.", labels=labels
    )
    to_running = GaugeMetricFamily(
        f"{PREFIX}_instance_time_to_running_seconds",
        "From the engine's launch to the instance being in rotation, for its current start.",
        labels=labels,
    )
    for facts in sorted(instances, key=lambda item: (item.deployment, item.replica_index)):
        values = [facts.deployment, str(facts.instance_id), str(facts.replica_index)]
        restarts.add_metric(values, facts.restart_count)
        started, ready = facts.started_at, facts.ready_at
        if facts.state == "running" and started and ready and ready >= started:
            to_running.add_metric(values, (ready - started).total_seconds())
    return [by_state, restarts, to_running]


@dataclass(frozen=True)
class WorkerGpus:
    """One host that runs engines, and its GPUs as NVML last read them there."""

    worker: str
    # Whether NVML was read there (False: no driver, or the worker is lost).
    available: bool
    gpus: Sequence[GpuInfo]


def gpu_families(workers: Sequence[WorkerGpus]) -> list[Metric]:
    """Each GPU of each worker host as NVML last read it (utilization, memory, temperature, power)."""
    labels = ["worker", "gpu", "uuid", "name"]

    def gauge(name: str, documentation: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{PREFIX}_gpu_{name}", documentation, labels=labels)

    utilization = gauge("utilization_percent", "GPU utilization (NVML).")
    used = gauge("memory_used_bytes", "GPU memory in use (NVML).")
    total = gauge("memory_total_bytes", "GPU memory (NVML).")
    temperature = gauge("temperature_celsius", "GPU temperature (NVML).")
    power = gauge("power_watts", "GPU power draw (NVML).")
    available = GaugeMetricFamily(
        f"{PREFIX}_gpu_telemetry_available",
        "1 when NVML could be read on the worker host.",
        labels=["worker"],
    )
    for host in workers:
        available.add_metric([host.worker], 1.0 if host.available else 0.0)
        for gpu in host.gpus:
            values = [host.worker, str(gpu.index), gpu.uuid, gpu.name]
            used.add_metric(values, gpu.memory_used_bytes)
            total.add_metric(values, gpu.memory_total_bytes)
            if gpu.utilization_percent is not None:
                utilization.add_metric(values, gpu.utilization_percent)
            if gpu.temperature_celsius is not None:
                temperature.add_metric(values, gpu.temperature_celsius)
            if gpu.power_watts is not None:
                power.add_metric(values, gpu.power_watts)
    return [available, utilization, used, total, temperature, power]


def memory_booking_families(measurements: Sequence[BookingMeasurement]) -> list[Metric]:
    """Running replicas placed by memory: the bytes booked on their GPU for the current start,
    what the engine logged it took, and the difference (+: over its booking), from
    ``control/booking_check.py``."""
    labels = ["deployment", "replica", "worker", "gpu"]
    booked = GaugeMetricFamily(
        f"{PREFIX}_memory_booked_bytes",
        "GPU memory booked for the replica's current start (estimate + placement headroom).",
        labels=labels,
    )
    used = GaugeMetricFamily(
        f"{PREFIX}_memory_engine_used_bytes",
        "GPU memory the replica's engine took at its start, as its log says (CUDA context included).",
        labels=labels,
    )
    error = GaugeMetricFamily(
        f"{PREFIX}_memory_booking_error_bytes",
        "Used minus booked GPU memory of the replica's current start (+: over its booking).",
        labels=labels,
    )
    for measurement in sorted(measurements, key=lambda m: (m.deployment, m.replica)):
        values = [measurement.deployment, str(measurement.replica), measurement.worker, measurement.gpu]
        booked.add_metric(values, measurement.booked_bytes)
        used.add_metric(values, measurement.used_bytes)
        error.add_metric(values, measurement.used_bytes - measurement.booked_bytes)
    return [booked, used, error]


def booking_families(shortfalls: Sequence[tuple[str, int, int, int]]) -> list[Metric]:
    """Replicas placed by memory: the KV tokens booked for the current start, and how many the
    engine logged fewer (0: it got at least its booking), from ``control/start_check.py``."""
    labels = ["deployment", "replica"]
    booked = GaugeMetricFamily(
        f"{PREFIX}_kv_booking_tokens",
        "KV-cache tokens booked for the replica's current start (placement by memory).",
        labels=labels,
    )
    short = GaugeMetricFamily(
        f"{PREFIX}_kv_booking_shortfall_tokens",
        "KV-cache tokens the engine logged fewer than its booking, for the current start (0: none).",
        labels=labels,
    )
    for deployment, replica, booked_tokens, logged_tokens in sorted(shortfalls):
        values = [deployment, str(replica)]
        booked.add_metric(values, booked_tokens)
        short.add_metric(values, max(0, booked_tokens - logged_tokens))
    return [booked, short]
