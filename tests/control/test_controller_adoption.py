"""A restarted server's controller takes back the engines the previous one left running; on the
runtime double (``conftest.py``), whose engines outlive a runtime as processes outlive a server.
Each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import delete

from modelyard.store.tables import Instance

from .conftest import ControllerHarness


async def test_a_restarted_controller_adopts_the_running_engine(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    engine = harness.engine(harness.first())
    # A server killed without a chance to stop its engines: the engines live on.
    await harness.new_controller(stop_engines=False)
    await harness.wait_for(lambda: harness.running_count() == 1, "adopted replica running")
    [instance] = harness.instances()
    assert harness.engine(instance) is engine and engine.alive
    assert harness.host.start_count == 1  # nothing was started again
    assert any(f"re-adopted engine {engine.handle.label}" in event.reason for event in harness.events())


async def test_a_readopted_running_engine_is_back_in_rotation_at_once_with_its_verification(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(skip_verification=False)
    await harness.wait_for(lambda: harness.running_count() == 1, "running and verified")
    [before] = harness.instances()
    assert before.verified_at is not None and before.verification
    await harness.controller.shutdown(stop_engines=False)
    harness.endpoints.forget("chat")  # a new server process starts with no endpoints
    await harness.new_controller(stop_engines=False)
    # In rotation when start() returns: no readiness wait, no verification run again.
    [endpoint] = harness.endpoints.endpoints_for("chat")
    [after] = harness.instances()
    assert endpoint.instance_id == after.id and after.state == "running"
    assert after.verified_at == before.verified_at and after.verification == before.verification
    assert "back in rotation" in after.reason
    assert not any(
        event.to_state == "starting" and event.at > before.updated_at for event in harness.events()
    )


async def test_an_engine_no_instance_holds_is_stopped_at_start_as_an_orphan(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    orphan = harness.engine(harness.first())
    # The server dies, and its instance row goes with it (restored from an older backup, say):
    # the next server finds an engine of its own that no instance holds.
    await harness.controller.shutdown(stop_engines=False)
    with harness.database.session() as session:
        session.execute(delete(Instance))
        session.commit()
    await harness.new_controller(stop_engines=False)
    assert not orphan.alive  # stopped before start() returned
    await harness.wait_for(lambda: harness.running_count() == 1, "a new replica 0 running")
    assert harness.engine(harness.first()) is not orphan and harness.host.start_count == 2
