"""Scale to zero in the autoscaler's loop, on a real store with the test's clock: idleness read
from the gateway's counts, the hold policy it gives the gateway, a wake, a removed deployment
that no wake brings back, and the idle time kept across a server restart (counted from the last
request or change the store knows of). (Through a real server: tests/gateway/test_scale_to_zero.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from modelyard.control.autoscale.loop import AutoscaleLoop
from modelyard.control.endpoints import Endpoint, EndpointRegistry, HoldPolicy
from modelyard.store.database import Database
from modelyard.store.tables import AutoscaleEvent, Deployment, UsageRecord

from .conftest import add_deployment

AUTOSCALE: dict[str, Any] = {
    "min": 0,
    "max": 2,
    "target": {"metric": "waiting_per_replica", "value": 2},
    "idle_s": 300,
    "max_held_requests": 8,
    "max_hold_s": 30,
}


async def test_idle_is_counted_from_the_last_request_the_gateway_saw(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    (tmp_path / "model").mkdir()
    add_deployment(database, tmp_path / "model", replicas=0, autoscale=AUTOSCALE)
    clock = [0.0]
    activity: list[tuple[int, int] | None] = [(5, 0)]
    registry = EndpointRegistry()
    registry.publish("chat", [])
    loop = AutoscaleLoop(
        database=database,
        endpoints=registry,
        poke=lambda: None,
        monotonic=lambda: clock[0],
        activity_source=lambda name: activity[0],
    )
    try:
        assert await loop.step() == []  # at zero, nothing held: stays at zero
        # The gateway is told to hold chat's requests while none is ready.
        assert registry.hold_for("chat") == HoldPolicy(1, 8, 30.0)
        loop.wake("chat")  # a request held at zero replicas
        [woken] = await loop.step()
        assert (woken.desired_replicas, woken.reason) == (
            1,
            "1 request(s) held at the gateway while scaled to zero: 0 → 1",
        )
        # Starting (no ready replica yet): never idle, however long it takes.
        clock[0] = 1000.0
        assert await loop.step() == []
        # Ready from now on; a request at 200 s; idle from then.
        registry.publish("chat", [Endpoint("chat", 1, "http://127.0.0.1:9", "chat")])
        clock[0] = 1001.0
        assert await loop.step() == []
        clock[0], activity[0] = 1200.0, (6, 0)
        assert await loop.step() == []
        clock[0] = 1499.0
        assert await loop.step() == []
        clock[0] = 1500.0
        [zero] = await loop.step()
        assert (zero.desired_replicas, zero.direction) == (0, "down")
        assert zero.reason == "no request for 300 s (idle_s 300): 1 → 0, scaled to zero"
    finally:
        await loop.shutdown()


async def test_a_removed_deployment_is_not_woken_and_no_longer_held(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    (tmp_path / "model").mkdir()
    add_deployment(database, tmp_path / "model", replicas=0, autoscale=AUTOSCALE)
    registry = EndpointRegistry()
    registry.publish("chat", [])
    loop = AutoscaleLoop(database=database, endpoints=registry, poke=lambda: None, monotonic=lambda: 0.0)
    try:
        assert await loop.step() == []
        assert registry.hold_for("chat") is not None
        with database.session() as session:
            deployment = session.scalar(select(Deployment))
            assert deployment is not None
            deployment.desired_state = "deleted"
            session.commit()
        loop.wake("chat")
        assert await loop.step() == []
        assert registry.hold_for("chat") is None
        with database.session() as session:
            assert list(session.scalars(select(AutoscaleEvent))) == []
            deployment = session.scalar(select(Deployment))
            assert deployment is not None and deployment.replicas == 0
    finally:
        await loop.shutdown()


def _restarted_loop(
    database: Database, registry: EndpointRegistry, clock: list[float], wall: datetime
) -> AutoscaleLoop:
    """The autoscaler of a server that has just started: its gateway has counted no request yet."""
    return AutoscaleLoop(
        database=database,
        endpoints=registry,
        poke=lambda: None,
        monotonic=lambda: clock[0],
        wall_clock=lambda: wall + timedelta(seconds=clock[0]),
        activity_source=lambda name: None,
    )


def _used_at(database: Database, changed_at: datetime, last_request_at: datetime | None) -> None:
    """The deployment as a server left it: last changed at ``changed_at``, last asked at
    ``last_request_at`` (the usage row its gateway wrote)."""
    with database.session() as session:
        deployment = session.scalar(select(Deployment))
        assert deployment is not None
        deployment.created_at = deployment.updated_at = changed_at
        if last_request_at is not None:
            session.add(
                UsageRecord(deployment_name="chat", endpoint="/v1/chat/completions", at=last_request_at)
            )
        session.commit()


async def test_after_a_restart_idle_counts_from_the_last_request_before_it(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    (tmp_path / "model").mkdir()
    add_deployment(database, tmp_path / "model", replicas=1, autoscale=AUTOSCALE)
    restarted_at = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    _used_at(database, restarted_at - timedelta(hours=2), restarted_at - timedelta(seconds=290))
    # Requests before the deployment of that name was made are another deployment's.
    _used_at(database, restarted_at - timedelta(hours=2), restarted_at - timedelta(hours=3))
    registry = EndpointRegistry()
    registry.publish("chat", [])  # the restart starts the replica again: not ready yet
    clock = [0.0]
    loop = _restarted_loop(database, registry, clock, restarted_at)
    try:
        assert await loop.step() == []  # 290 s without a request
        clock[0] = 9.0
        assert await loop.step() == []
        clock[0] = 10.0
        [zero] = await loop.step()
        assert zero.reason == "no request for 300 s (idle_s 300): 1 → 0, scaled to zero"
    finally:
        await loop.shutdown()


async def test_after_a_restart_a_deployment_never_asked_is_idle_since_its_last_change(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    (tmp_path / "model").mkdir()
    add_deployment(database, tmp_path / "model", replicas=1, autoscale=AUTOSCALE)
    restarted_at = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    # Set to scale to zero 100 s before the restart; its last request (an hour before) is older.
    _used_at(database, restarted_at - timedelta(seconds=100), restarted_at - timedelta(hours=1))
    registry = EndpointRegistry()
    registry.publish("chat", [Endpoint("chat", 1, "http://127.0.0.1:9", "chat")])
    clock = [0.0]
    loop = _restarted_loop(database, registry, clock, restarted_at)
    try:
        assert await loop.step() == []
        clock[0] = 199.0
        assert await loop.step() == []
        clock[0] = 200.0
        [zero] = await loop.step()
        assert zero.reason == "no request for 300 s (idle_s 300): 1 → 0, scaled to zero"
    finally:
        await loop.shutdown()
