"""The autoscaler's Prometheus figures (``server/metrics/autoscale_families.py``), read from a real
store as ``/metrics`` reads them: desired and running replicas, decisions by direction."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from modelyard.server.metrics.autoscale_families import autoscale_families, read_autoscale
from modelyard.store.database import Database
from modelyard.store.tables import AutoscaleEvent, Deployment, Instance, ModelFile

AUTOSCALE = {"min": 1, "max": 3, "target": {"metric": "waiting_per_replica", "value": 2}}


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def test_desired_actual_and_decisions_per_autoscaled_deployment(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    with database.session() as session:
        model = ModelFile(name="tiny", path=str(tmp_path), state="valid")
        session.add(model)
        session.flush()
        chat = Deployment(name="chat", model_file_id=model.id, backend="vllm", backend_version="1")
        chat.replicas = 2
        chat.autoscale = AUTOSCALE
        by_hand = Deployment(name="by-hand", model_file_id=model.id, backend="vllm", backend_version="1")
        session.add_all([chat, by_hand])
        session.flush()
        session.add_all(
            [
                Instance(deployment_id=chat.id, replica_index=0, state="running"),
                Instance(deployment_id=chat.id, replica_index=1, state="starting"),
                AutoscaleEvent(
                    deployment_name="chat",
                    deployment_uid=chat.uid,
                    direction="up",
                    from_replicas=1,
                    to_replicas=2,
                ),
            ]
        )
        session.commit()
    registry = CollectorRegistry(auto_describe=False)
    figures = read_autoscale(database)
    held = {figures.ids["chat"]: 3}  # as the gateway's shared counters would say
    registry.register(_Families(autoscale_families(figures, lambda identifier: held.get(identifier, 0))))
    text = generate_latest(registry).decode()
    database.close()
    assert 'modelyard_autoscale_desired_replicas{deployment="chat"} 2.0' in text
    assert 'modelyard_autoscale_actual_replicas{deployment="chat"} 1.0' in text
    assert 'modelyard_autoscale_decisions_total{deployment="chat",direction="up"} 1.0' in text
    assert 'modelyard_autoscale_decisions_total{deployment="chat",direction="down"} 0.0' in text
    assert 'modelyard_autoscale_held_requests{deployment="chat"} 3.0' in text
    assert "by-hand" not in text
