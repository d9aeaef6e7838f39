"""The autoscaler in ``/metrics``, read from the store at scrape time (so the figures survive a
restart, as the controller's do):

- ``modelyard_autoscale_desired_replicas{deployment}``: the replicas it asks for now;
- ``modelyard_autoscale_actual_replicas{deployment}``: those running;
- ``modelyard_autoscale_decisions_total{deployment,direction}``: its changes, ``up`` or ``down``
  (``unplaced``: replicas it asked for that could not be placed, each reason once);
- ``modelyard_autoscale_held_requests{deployment}``: requests the gateway holds now while a
  deployment scaled to zero starts a replica (every worker's, from the shared counters).

Only deployments with ``autoscale`` set appear in the gauges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import func, select

from modelyard.server.metrics.families import PREFIX
from modelyard.store.database import Database
from modelyard.store.tables import AutoscaleEvent, Deployment, Instance

DIRECTIONS = ("up", "down", "unplaced")


@dataclass(frozen=True)
class AutoscaleFigures:
    # deployment -> (desired, running)
    replicas: dict[str, tuple[int, int]]
    # (deployment, direction) -> decisions so far (the deployment's current uid only)
    decisions: dict[tuple[str, str], int]
    # deployment -> its id (where the gateway counts its held requests)
    ids: dict[str, int] = field(default_factory=dict)


def read_autoscale(database: Database) -> AutoscaleFigures:
    """Blocking: call in a worker thread."""
    with database.session() as session:
        running = (
            select(func.count(Instance.id))
            .where(Instance.deployment_id == Deployment.id, Instance.state == "running")
            .scalar_subquery()
        )
        rows = session.execute(
            select(Deployment.name, Deployment.uid, Deployment.replicas, running, Deployment.id).where(
                Deployment.autoscale.is_not(None)
            )
        ).all()
        replicas = {name: (desired, int(count)) for name, _uid, desired, count, _id in rows}
        names = {uid: name for name, uid, _desired, _count, _id in rows}
        ids = {name: identifier for name, _uid, _desired, _count, identifier in rows}
        decisions: dict[tuple[str, str], int] = {}
        if names:
            for uid, direction, count in session.execute(
                select(AutoscaleEvent.deployment_uid, AutoscaleEvent.direction, func.count())
                .where(AutoscaleEvent.deployment_uid.in_(list(names)))
                .group_by(AutoscaleEvent.deployment_uid, AutoscaleEvent.direction)
            ):
                decisions[(names[uid], direction)] = int(count)
    return AutoscaleFigures(replicas=replicas, decisions=decisions, ids=ids)


def autoscale_families(
    figures: AutoscaleFigures, held_requests: Callable[[int], int] | None = None
) -> list[Metric]:
    """``held_requests(deployment_id)``: the requests the gateway holds for it now (None: no gateway)."""
    desired = GaugeMetricFamily(
        f"{PREFIX}_autoscale_desired_replicas",
        "Replicas the autoscaler asks for now, per autoscaled deployment.",
        labels=["deployment"],
    )
    actual = GaugeMetricFamily(
        f"{PREFIX}_autoscale_actual_replicas",
        "Replicas running now, per autoscaled deployment.",
        labels=["deployment"],
    )
    decisions = CounterMetricFamily(
        f"{PREFIX}_autoscale_decisions",
        "The autoscaler's decisions: up, down, and replicas it asked for that could not be placed.",
        labels=["deployment", "direction"],
    )
    held = GaugeMetricFamily(
        f"{PREFIX}_autoscale_held_requests",
        "Requests the gateway holds now while a deployment scaled to zero starts a replica.",
        labels=["deployment"],
    )
    for name, (wanted, running) in sorted(figures.replicas.items()):
        desired.add_metric([name], wanted)
        actual.add_metric([name], running)
        identifier = figures.ids.get(name)
        if held_requests is not None and identifier is not None:
            held.add_metric([name], held_requests(identifier))
        for direction in DIRECTIONS:
            decisions.add_metric([name, direction], figures.decisions.get((name, direction), 0))
    return [desired, actual, decisions, held]
