"""What the controller holds in memory for an instance lives only as long as the instance: scaled
down, its deployment removed, nothing of it is left (no engine, booking, task, back-off count,
placement refusal, memory demand ...). On the runtime double (``conftest.py``), SQLite and
PostgreSQL."""

from __future__ import annotations

from sqlalchemy import select

from modelyard.store.tables import Deployment, ModelFile

from .conftest import ControllerHarness

FAILING_START = ["--fail-start", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]


def deployment_exists(harness: ControllerHarness, name: str) -> bool:
    with harness.database.session() as session:
        return session.scalar(select(Deployment.id).where(Deployment.name == name)) is not None


def add_gpu_deployment(harness: ControllerHarness) -> None:
    """A deployment that asks for a GPU on this host, which has none: it waits for placement."""
    with harness.database.session() as session:
        model = session.scalars(select(ModelFile)).one()
        session.add(
            Deployment(
                name="big",
                model_file_id=model.id,
                backend="vllm-double",
                backend_version="1.0",
                replicas=1,
                gpus_per_replica=1,
                backend_parameters=[],
                skip_verification=True,
            )
        )
        session.commit()
    harness.controller.poke()


async def test_a_scaled_down_replica_leaves_nothing_in_the_controller(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(replicas=2, backend_parameters=FAILING_START)
    await harness.wait_for(
        lambda: len(harness.instances()) == 2 and all(i.restart_count >= 1 for i in harness.instances()),
        "both replicas failed a start",
    )
    removed = harness.instances()[1].id
    harness.set_deployment(replicas=1)
    await harness.wait_for(lambda: len(harness.instances()) == 1, "replica 1 removed")
    await harness.controller.reconcile()  # a whole pass after the one that removed it
    left = {kind: ids for kind, ids in harness.controller.held_state().items() if removed in ids}
    assert not left, f"left behind: {left}"


async def test_removed_deployments_leave_nothing_in_the_controller(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    add_gpu_deployment(harness)
    await harness.wait_for(
        lambda: "waiting for placement" in (harness.instances("big") or [harness.first()])[0].reason,
        "big waiting for a GPU",
    )
    await harness.stop_then_run(backend_parameters=FAILING_START)
    await harness.wait_for(lambda: harness.first().restart_count >= 1, "a failed start")
    assert any(harness.controller.held_state().values()), "it holds the instances while they live"
    harness.set_deployment("big", desired_state="deleted")
    harness.set_deployment("chat", desired_state="deleted")
    await harness.wait_for(
        lambda: not deployment_exists(harness, "big") and not deployment_exists(harness, "chat"),
        "both deployments removed",
    )
    await harness.controller.reconcile()  # a whole pass after the one that removed them
    held = harness.controller.held_state()
    assert held == {name: [] for name in held}, f"left behind: { {k: v for k, v in held.items() if v} }"
