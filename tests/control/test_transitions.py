"""Typed transitions of an instance row (``control/transitions.py``) through the real store: a
valid one writes what the API then shows; an invalid one is refused, naming the move, and
writes nothing. On a real SQLite file (and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from modelyard.control.instance_store import InstanceStore
from modelyard.control.states import IllegalTransition, InstanceState
from modelyard.control.transitions import (
    EngineLaunched,
    EngineStopped,
    Launching,
    Ready,
    StartFailed,
    StartStalled,
    Stopping,
    Transition,
)
from modelyard.services.instances import instance_to_json
from modelyard.store.database import Database
from modelyard.store.tables import Deployment, Instance, InstanceEvent, ModelFile

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Iterator[InstanceStore]:
    database = Database.open(database_url)
    with database.session() as session:
        model = ModelFile(name="tiny", path=str(tmp_path), state="valid")
        session.add(model)
        session.flush()
        deployment = Deployment(name="chat", model_file_id=model.id, backend="vllm", backend_version="1")
        session.add(deployment)
        session.flush()
        session.add(Instance(deployment_id=deployment.id, replica_index=0, state="pending", reason="new"))
        session.commit()
    try:
        yield InstanceStore(database)
    finally:
        database.close()


def row(store: InstanceStore) -> Instance:
    with store.database.session() as session:
        return session.scalars(select(Instance)).one()


def shown(store: InstanceStore) -> dict[str, object]:
    """The instance as ``GET /api/v1/deployments/chat`` shows it."""
    return instance_to_json(row(store), now_seconds=NOW.timestamp())


def events(store: InstanceStore) -> list[tuple[str | None, str, str]]:
    with store.database.session() as session:
        return [
            (event.from_state, event.to_state, event.reason)
            for event in session.scalars(select(InstanceEvent).order_by(InstanceEvent.id))
        ]


def apply(store: InstanceStore, change: Transition) -> None:
    assert store.transition(row(store).id, change)


RANK = {"worker_id": "local", "worker_name": "local", "host": "127.0.0.1", "gpu_ids": [0]}
LAUNCHING = Launching(
    reason="launching on the process runtime (GPU 0)",
    runtime="process",
    launch_token="token-1",
    host="127.0.0.1",
    port=8101,
    engine_port=8101,
    gpu_ids=[0],
    placement={
        "ranks": [{"worker_id": "local", "worker_name": "local", "host": "127.0.0.1", "gpu_ids": [0]}]
    },
    mounts=[],
    command=["vllm", "serve", "/models/tiny", "--api-key", "***"],
    log_path="/data/instances/u/start-1.log",
    start_count=1,
    started_at=NOW,
)
LAUNCHED = EngineLaunched(
    reason="engine pid 4242 starting at http://127.0.0.1:8101 (GPU 0)",
    handle={"runtime": "process", "id": "4242:17.5", "label": "pid 4242"},
    pid=4242,
    process_start_time=17.5,
    command=["vllm", "serve", "/models/tiny", "--api-key", "***"],
)


def test_a_start_then_ready_stores_what_the_api_shows(store: InstanceStore) -> None:
    apply(store, LAUNCHING)
    apply(store, LAUNCHED)
    apply(store, Ready(reason="ready in 3.0 s", ready_at=NOW + timedelta(seconds=3)))
    seen = shown(store)
    assert (seen["state"], seen["reason"]) == ("running", "ready in 3.0 s")
    assert (seen["runtime"], seen["engine"], seen["pid"]) == ("process", "pid 4242", 4242)
    assert (seen["host"], seen["port"], seen["gpu_ids"], seen["start_count"]) == ("127.0.0.1", 8101, [0], 1)
    assert (
        seen["started_at"] == NOW.isoformat() and seen["ready_at"] == (NOW + timedelta(seconds=3)).isoformat()
    )
    assert seen["command"] == ["vllm", "serve", "/models/tiny", "--api-key", "***"]
    assert seen["verification"] == [] and seen["verified_at"] is None  # the suite did not run
    # One event per new state; the engine's handle within starting is not one.
    assert [(before, after) for before, after, _ in events(store)] == [
        ("pending", "starting"),
        ("starting", "running"),
    ]


def test_a_failed_start_clears_the_engine_and_schedules_the_restart(store: InstanceStore) -> None:
    apply(store, LAUNCHING)
    apply(store, LAUNCHED)
    apply(store, StartStalled(reason="starting, but silent for 600 s", diagnosis="stuck loading weights"))
    apply(
        store,
        StartFailed(reason="not healthy after 1800 s; restart 1 in 1 s", restart_count=1, next_start_at=NOW),
    )
    seen = shown(store)
    assert (seen["state"], seen["pid"], seen["engine"]) == ("error", None, None)
    assert (seen["restart_count"], seen["next_start_at"]) == (1, NOW.isoformat())
    assert seen["diagnosis"] == "stuck loading weights"  # kept: the failure did not say otherwise
    apply(
        store,
        StartFailed(reason="exited; restart 2 in 2 s", restart_count=2, next_start_at=NOW, diagnosis=None),
    )
    assert shown(store)["diagnosis"] is None
    # The stall stays starting, and is an event of its own.
    assert ("starting", "starting", "starting, but silent for 600 s") in events(store)


def test_the_next_start_clears_what_the_last_one_left(store: InstanceStore) -> None:
    apply(store, LAUNCHING)
    apply(store, LAUNCHED)
    apply(store, Ready(reason="ready", ready_at=NOW, verification=[{"status": "passed"}], verified_at=NOW))
    apply(store, Stopping(reason="deployment stopped"))
    apply(store, EngineStopped(reason="deployment stopped"))
    assert (shown(store)["state"], shown(store)["pid"]) == ("stopped", None)
    again = Launching(**{**LAUNCHING.__dict__, "start_count": 2, "launch_token": "token-2"})
    apply(store, again)
    seen = shown(store)
    assert (seen["state"], seen["start_count"], seen["engine"], seen["pid"]) == ("starting", 2, None, None)
    assert seen["ready_at"] is None and seen["verification"] == [] and seen["verified_at"] is None


def test_an_engine_handle_for_an_instance_that_is_not_starting_is_refused(store: InstanceStore) -> None:
    with pytest.raises(
        IllegalTransition, match=r"EngineLaunched \(pending -> starting\) leaves only starting"
    ):
        apply(store, LAUNCHED)
    assert (row(store).state, row(store).handle, events(store)) == ("pending", None, [])


def test_a_move_the_state_machine_does_not_have_is_refused_naming_the_allowed_ones(
    store: InstanceStore,
) -> None:
    with pytest.raises(IllegalTransition) as refused:
        apply(store, Ready(reason="ready", ready_at=NOW))
    assert str(refused.value).startswith("instance ") and "Ready pending -> running" in str(refused.value)
    assert "(from pending: error, starting, stopped)" in str(refused.value)
    assert (row(store).state, row(store).ready_at, events(store)) == ("pending", None, [])


def test_a_stopped_instance_cannot_be_stopping(store: InstanceStore) -> None:
    apply(store, EngineStopped(reason="deployment stopped"))
    with pytest.raises(IllegalTransition, match="stopped -> stopping"):
        apply(store, Stopping(reason="again"))
    assert row(store).state == InstanceState.STOPPED


def test_a_transition_of_a_deleted_instance_stores_nothing_and_says_so(store: InstanceStore) -> None:
    instance_id = row(store).id
    store.delete_instance(instance_id)
    assert store.transition(instance_id, LAUNCHING) is False
