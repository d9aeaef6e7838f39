"""The controller with the real process runtime, starting real engine processes.

The engine is the reference server (``modelyard.bench.reference_server``) playing vLLM's
contract: a double of vLLM, launched exactly as the platform launches a real engine, through a
custom backend whose command line is vLLM's. Each test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest
from sqlalchemy import select

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.runtimes.selection import RuntimeSet
from modelyard.services.deployments import request_verification
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, Deployment, Instance, InstanceEvent, ModelFile

WAIT_SECONDS = 60.0

VLLM_DOUBLE_SPEC = {
    "name": "vllm-double",
    "family": "custom",
    "description": "the reference server playing vLLM (a test double)",
    "default_version": "1.0",
    "versions": {
        "1.0": {
            "version": "1.0",
            "executable": "python3",
            "run_command": (
                "-m modelyard.bench.reference_server vllm serve {{model_path}} --host {{worker_ip}} "
                "--port {{port}} --served-model-name {{model_name}}"
            ),
            "reasoning_field": "reasoning",
            "stop_grace_seconds": 10.0,
        }
    },
}

FAST = ControllerOptions(
    tick_seconds=0.1, backoff_initial_seconds=0.2, backoff_max_seconds=1.0, stall_seconds=2.0
)


@dataclass
class Harness:
    database: Database
    settings: Settings
    endpoints: EndpointRegistry
    controller: Controller

    def instances(self, name: str = "chat") -> list[Instance]:
        with self.database.session() as session:
            return list(
                session.scalars(
                    select(Instance)
                    .join(Deployment)
                    .where(Deployment.name == name)
                    .order_by(Instance.replica_index)
                )
            )

    def events(self, name: str = "chat") -> list[InstanceEvent]:
        with self.database.session() as session:
            return list(
                session.scalars(
                    select(InstanceEvent)
                    .where(InstanceEvent.deployment_name == name)
                    .order_by(InstanceEvent.id)
                )
            )

    def set_deployment(self, name: str = "chat", **fields: object) -> None:
        with self.database.session() as session:
            deployment = session.scalar(select(Deployment).where(Deployment.name == name))
            assert deployment is not None
            for key, value in fields.items():
                setattr(deployment, key, value)
            session.commit()
        self.controller.poke()

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Poll the store until ``condition`` holds; fail with ``what`` after WAIT_SECONDS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not condition():
            if loop.time() > deadline:
                states = [(i.replica_index, i.state, i.reason) for i in self.instances()]
                raise AssertionError(f"timed out waiting for {what}; instances: {states}")
            await asyncio.sleep(0.05)

    def running_count(self, name: str = "chat") -> int:
        return sum(1 for instance in self.instances(name) if instance.state == "running")


def _add_deployment(
    database: Database, model_dir: Path, *, replicas: int = 1, extra: list[str] | None = None
) -> None:
    with database.session() as session:
        session.add(CustomBackend(name="vllm-double", spec=VLLM_DOUBLE_SPEC))
        model = ModelFile(name="tiny", path=str(model_dir), state="valid")
        session.add(model)
        session.flush()
        session.add(
            Deployment(
                name="chat",
                model_file_id=model.id,
                backend="vllm-double",
                backend_version="1.0",
                replicas=replicas,
                backend_parameters=extra or [],
                skip_verification=True,
            )
        )
        session.commit()


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    database = Database.open(database_url)
    settings = Settings(data_dir=tmp_path / "data")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _add_deployment(database, model_dir)
    endpoints = EndpointRegistry()
    controller = Controller(
        settings=settings, database=database, endpoints=endpoints, runtimes=RuntimeSet(), options=FAST
    )
    await controller.start()
    try:
        yield Harness(database, settings, endpoints, controller)
    finally:
        await controller.shutdown(stop_engines=True)
        database.close()


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_deployment_reaches_running_and_is_published(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    # The moment the store says running, the gateway can route to it (no "no ready replica
    # (1 running)" window until the next reconcile).
    [endpoint] = harness.endpoints.endpoints_for("chat")
    [instance] = harness.instances()
    assert instance.reason.startswith("ready in")
    assert _alive(instance.pid)
    assert instance.log_path == str(harness.settings.instances_dir / instance.uid / "start-1.log")
    assert endpoint.base_url == f"http://127.0.0.1:{instance.port}"
    assert endpoint.served_model_name == "chat"
    assert endpoint.reasoning_field == "reasoning"
    transitions = [(event.from_state, event.to_state) for event in harness.events()]
    assert ("pending", "starting") in transitions and ("starting", "running") in transitions


async def test_killed_engine_restarts_with_the_reason_recorded(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    [before] = harness.instances()
    assert before.pid is not None
    os.kill(before.pid, signal.SIGKILL)
    await harness.wait_for(
        lambda: harness.instances()[0].restart_count == 1 and harness.instances()[0].state == "running",
        "the replica running again after SIGKILL",
    )
    [after] = harness.instances()
    assert after.pid != before.pid
    assert after.start_count == 2
    reasons = [event.reason for event in harness.events() if event.to_state == "error"]
    assert any("killed by SIGKILL while running" in reason for reason in reasons), reasons
    # The first start's log is kept beside the second's.
    assert Path(after.log_path or "").name == "start-2.log"
    assert (Path(after.log_path or "").parent / "start-1.log").is_file()


async def test_scale_up_and_down_starts_and_stops_engines(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(replicas=2)
    await harness.wait_for(lambda: harness.running_count() == 2, "two replicas running")
    ports = {instance.port for instance in harness.instances()}
    assert len(ports) == 2
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 2, "both published")
    second_pid = harness.instances()[1].pid
    harness.set_deployment(replicas=1)
    await harness.wait_for(lambda: len(harness.instances()) == 1, "replica 1 removed")
    assert not _alive(second_pid)
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "one endpoint left")


async def test_stop_then_start_then_remove_leaves_no_process(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    pid = harness.instances()[0].pid
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    assert not _alive(pid)
    assert harness.endpoints.endpoints_for("chat") == ()
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.running_count() == 1, "running again")
    pid = harness.instances()[0].pid
    harness.set_deployment(desired_state="deleted")
    await harness.wait_for(lambda: not harness.endpoints.is_known("chat"), "deployment forgotten")
    assert harness.instances() == []
    assert not _alive(pid)


async def test_restarted_controller_adopts_the_running_engine(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    pid = harness.instances()[0].pid
    # A server killed without a chance to stop its engines: the engines live on.
    await harness.controller.shutdown(stop_engines=False)
    assert _alive(pid)
    successor = Controller(
        settings=harness.settings,
        database=harness.database,
        endpoints=harness.endpoints,
        runtimes=RuntimeSet(),
        options=FAST,
    )
    harness.controller = successor
    await successor.start()
    await harness.wait_for(lambda: harness.running_count() == 1, "adopted replica running")
    [instance] = harness.instances()
    assert instance.pid == pid
    assert any("re-adopted engine pid" in event.reason for event in harness.events())


async def test_engine_failing_at_start_is_diagnosed_and_retried(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(
        backend_parameters=[
            "--fail-start",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    )
    # Restart the running replica so the new parameters apply.
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.instances()[0].restart_count >= 2, "two failed starts")
    [instance] = harness.instances()
    assert instance.state in ("error", "starting", "pending")
    errors = [event.reason for event in harness.events() if event.to_state == "error"]
    assert any("exited with code 1 while starting" in reason for reason in errors), errors
    assert instance.diagnosis is not None and "out of memory" in instance.diagnosis.lower()


async def test_stop_while_the_engine_is_still_loading_does_not_wait_for_it(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(desired_state="stopped", backend_parameters=["--startup-delay-s", "600"])
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.instances()[0].state == "starting", "starting (loading for 600 s)")
    loading_pid = harness.instances()[0].pid
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped while loading")
    assert not _alive(loading_pid)


def _set_metrics_path(harness: Harness, metrics_path: str) -> None:
    with harness.database.session() as session:
        backend = session.scalar(select(CustomBackend).where(CustomBackend.name == "vllm-double"))
        assert backend is not None
        spec = json.loads(json.dumps(backend.spec))
        spec["versions"]["1.0"]["metrics_path"] = metrics_path
        backend.spec = spec
        session.commit()


async def _restart_verified(harness: Harness) -> None:
    harness.set_deployment(desired_state="stopped", skip_verification=False)
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")


async def test_a_readopted_running_engine_is_back_in_rotation_at_once_with_its_verification(
    harness: Harness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await _restart_verified(harness)
    await harness.wait_for(lambda: harness.running_count() == 1, "running and verified")
    [before] = harness.instances()
    assert before.verified_at is not None and before.verification
    await harness.controller.shutdown(stop_engines=False)
    harness.endpoints.forget("chat")  # a new server process starts with no endpoints
    successor = Controller(
        settings=harness.settings,
        database=harness.database,
        endpoints=harness.endpoints,
        runtimes=RuntimeSet(),
        options=FAST,
    )
    harness.controller = successor
    await successor.start()
    # In rotation when start() returns: no readiness wait, no verification run again.
    [endpoint] = harness.endpoints.endpoints_for("chat")
    [after] = harness.instances()
    assert endpoint.instance_id == after.id and after.state == "running"
    assert after.verified_at == before.verified_at and after.verification == before.verification
    assert "back in rotation" in after.reason
    assert not any(
        event.to_state == "starting" and event.at > before.updated_at for event in harness.events()
    )


async def test_verification_run_again_puts_a_fixed_instance_back_into_rotation(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    _set_metrics_path(harness, "/no-such-metrics")
    await _restart_verified(harness)
    await harness.wait_for(lambda: harness.instances()[0].state == "error", "verification failed")
    [failed] = harness.instances()
    assert "verification failed, kept out of rotation" in failed.reason and "metrics" in failed.reason
    assert harness.endpoints.endpoints_for("chat") == ()
    pid = failed.pid
    _set_metrics_path(harness, "/metrics")  # the user fixes the backend, then asks again
    with harness.database.session() as session:
        request_verification(session, "chat")
    harness.controller.poke()
    await harness.wait_for(lambda: harness.running_count() == 1, "running after the suite passed again")
    [fixed] = harness.instances()
    assert fixed.pid == pid  # the same engine, verified again, not restarted
    assert "verification run again on request" in fixed.reason
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "back in rotation")


async def test_a_start_whose_log_stops_growing_is_reported_while_it_keeps_starting(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(desired_state="stopped", backend_parameters=["--startup-delay-s", "600"])
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(
        lambda: "printed nothing for" in harness.instances()[0].reason, "the silent start reported"
    )
    [instance] = harness.instances()
    assert instance.state == "starting" and _alive(instance.pid)


async def test_an_engine_that_asks_for_its_own_key_gets_it_from_readiness_and_the_gateway(
    harness: Harness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(desired_state="stopped", backend_parameters=["--api-key", "engine-own-key"])
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.running_count() == 1, "running with its key")
    [endpoint] = harness.endpoints.endpoints_for("chat")
    assert endpoint.engine_api_key == "engine-own-key"
    assert "engine-own-key" not in repr(endpoint)


async def test_a_verification_asked_for_one_start_is_not_run_again_after_a_restart(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    _set_metrics_path(harness, "/no-such-metrics")  # the suite fails on this engine
    with harness.database.session() as session:
        request_verification(session, "chat")
    harness.controller.poke()
    await harness.wait_for(lambda: harness.instances()[0].state == "error", "verification failed")
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.running_count() == 1, "running again")
    [restarted] = harness.instances()
    # The deployment skips the suite: the new start is in rotation, with no request left pending.
    assert restarted.start_count == 2 and restarted.verification_requested_at is None
    assert restarted.verification == [] and "ready" in restarted.reason


async def _restart_controller(harness: Harness, options: ControllerOptions) -> None:
    """Stop the controller and its engines; a new one with ``options`` starts them again."""
    await harness.controller.shutdown(stop_engines=True)
    harness.controller = Controller(
        settings=harness.settings,
        database=harness.database,
        endpoints=harness.endpoints,
        runtimes=RuntimeSet(),
        options=options,
    )
    await harness.controller.start()


async def test_a_verification_failed_by_a_busy_engine_is_retried_and_the_instance_enters_rotation(
    harness: Harness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    # The engine double answers its first 3 generation requests (the tiny chat, verify.speed,
    # verify.chat-answer) 2 s late: a CPU shared with something else while it starts.
    harness.set_deployment(
        skip_verification=False,
        backend_parameters=["--slow-requests", "3", "--slow-request-extra-ms", "2000"],
    )
    retry_seconds = 1.0
    await _restart_controller(
        harness,
        replace(
            FAST,
            verification_floor_seconds=0.5,
            verification_ceiling_seconds=1.0,
            verification_retry_initial_seconds=retry_seconds,
        ),
    )
    await harness.wait_for(
        lambda: harness.running_count() == 1 and "attempt 2" in harness.instances()[0].reason,
        "running after the second verification",
    )
    [instance] = harness.instances()
    assert instance.started_at is not None
    assert "verification passed on attempt 2" in instance.reason
    assert [endpoint.instance_id for endpoint in harness.endpoints.endpoints_for("chat")] == [instance.id]
    events = [event for event in harness.events() if event.at >= instance.started_at]
    [failed] = [event for event in events if "verification attempt 1 failed" in event.reason]
    assert failed.to_state == "starting"  # out of rotation, not an error: it is coming
    assert "verify.speed: no answer in time" in failed.reason
    assert f"the suite runs again in {retry_seconds:.0f} s" in failed.reason
    [again] = [event for event in events if event.reason.startswith("verifying again (attempt 2)")]
    # It said "in 1 s" no earlier than it scheduled the run, and the run waited until then.
    scheduled = instance.verification_requested_at
    assert scheduled is not None and (scheduled - failed.at).total_seconds() <= retry_seconds
    assert again.at >= scheduled


async def test_a_wrong_answer_is_not_retried_and_says_what_to_do(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    _set_metrics_path(harness, "/no-such-metrics")
    await _restart_verified(harness)
    await harness.wait_for(lambda: harness.instances()[0].state == "error", "verification failed")
    [failed] = harness.instances()
    assert "it is not retried" in failed.reason and "`modelyard verify chat`" in failed.reason
    assert failed.verification_requested_at is None


def _engine_threads(pid: int | None) -> str | None:
    assert pid is not None
    return psutil.Process(pid).environ().get("OMP_NUM_THREADS")


async def test_cpu_engines_share_the_cores_by_their_thread_variable(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    with harness.database.session() as session:
        backend = session.scalar(select(CustomBackend).where(CustomBackend.name == "vllm-double"))
        assert backend is not None
        spec = json.loads(json.dumps(backend.spec))
        spec["versions"]["1.0"]["cpu_threads_env"] = ["OMP_NUM_THREADS"]
        backend.spec = spec
        session.commit()
    # A server whose own environment leaves the variable unset, on 5 cores (1 kept for it).
    await harness.controller.shutdown(stop_engines=True)
    harness.controller = Controller(
        settings=harness.settings,
        database=harness.database,
        endpoints=harness.endpoints,
        runtimes=RuntimeSet(),
        options=replace(FAST, cpu_cores=5),
        environment={},
    )
    await harness.controller.start()
    await harness.wait_for(lambda: harness.running_count() == 1, "restarted with its threads")
    [first] = harness.instances()
    assert _engine_threads(first.pid) == "4"
    harness.set_deployment(replicas=2)
    await harness.wait_for(lambda: harness.running_count() == 2, "two replicas")
    second = harness.instances()[1]
    assert _engine_threads(second.pid) == "2"  # 4 cores for engines, 2 engines
    events = [event.reason for event in harness.events() if event.instance_id == second.id]
    assert any(
        "OMP_NUM_THREADS=2: 5 usable core(s) less 1 kept for the server" in reason for reason in events
    )
    # A value the deployment sets wins.
    harness.set_deployment(desired_state="stopped", replicas=1, env={"OMP_NUM_THREADS": "3"})
    await harness.wait_for(lambda: harness.instances()[0].state == "stopped", "stopped")
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.running_count() == 1, "running with its own value")
    assert _engine_threads(harness.instances()[0].pid) == "3"
