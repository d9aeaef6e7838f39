"""The controller's decisions over an instance's life: start, publish, restart after a crash,
scale, stop, delete, a start that fails or stalls; on the runtime double (``conftest.py``).
Each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .conftest import FAST, ControllerHarness


def loading(harness: ControllerHarness) -> Callable[[], bool]:
    """Starting, its engine launched (the handle is recorded after the launch token)."""
    return lambda: harness.first().state == "starting" and bool(harness.first().handle)


async def test_a_deployment_reaches_running_and_is_published_at_once(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    # The moment the store says running, the gateway can route to it (no "no ready replica
    # (1 running)" window until the next reconcile).
    [endpoint] = harness.endpoints.endpoints_for("chat")
    [instance] = harness.instances()
    assert instance.reason.startswith("ready in")
    assert harness.engine(instance).alive
    assert instance.log_path == str(harness.settings.instances_dir / instance.uid / "start-1.log")
    assert endpoint.base_url == f"http://127.0.0.1:{instance.port}"
    assert endpoint.served_model_name == "chat"
    assert endpoint.reasoning_field == "reasoning"
    transitions = [(event.from_state, event.to_state) for event in harness.events()]
    assert ("pending", "starting") in transitions and ("starting", "running") in transitions


async def test_a_killed_engine_is_started_again_with_the_reason_recorded(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    [before] = harness.instances()
    await harness.host.kill(harness.engine(before).handle)
    await harness.wait_for(lambda: harness.first().state != "running", "the exit noticed")
    harness.clock.advance(FAST.backoff_initial_seconds)  # the back-off passes
    await harness.wait_for(
        lambda: harness.first().restart_count == 1 and harness.first().state == "running",
        "the replica running again after SIGKILL",
    )
    [after] = harness.instances()
    assert after.handle != before.handle and after.start_count == 2
    assert harness.engine(after).alive
    reasons = [event.reason for event in harness.events() if event.to_state == "error"]
    assert any("killed by SIGKILL while running" in reason for reason in reasons), reasons
    # The first start's log is kept beside the second's.
    assert Path(after.log_path or "").name == "start-2.log"
    assert (Path(after.log_path or "").parent / "start-1.log").is_file()


async def test_scaling_up_and_down_starts_and_stops_engines(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_deployment(replicas=2)
    await harness.wait_for(lambda: harness.running_count() == 2, "two replicas running")
    assert len({instance.port for instance in harness.instances()}) == 2
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 2, "both published")
    second = harness.engine(harness.instances()[1])
    harness.set_deployment(replicas=1)
    await harness.wait_for(lambda: len(harness.instances()) == 1, "replica 1 removed")
    assert not second.alive
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "one endpoint left")


async def test_stop_then_start_then_remove_leaves_no_engine(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    engine = harness.engine(harness.first())
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.first().state == "stopped", "stopped")
    assert not engine.alive and engine.status is not None and engine.status.exit_code == 0
    assert harness.endpoints.endpoints_for("chat") == ()
    harness.set_deployment(desired_state="running")
    await harness.wait_for(lambda: harness.running_count() == 1, "running again")
    engine = harness.engine(harness.first())
    harness.set_deployment(desired_state="deleted")
    await harness.wait_for(lambda: not harness.endpoints.is_known("chat"), "deployment forgotten")
    assert harness.instances() == []
    assert not engine.alive and harness.host.engines() == []


async def test_an_engine_failing_at_start_is_diagnosed_and_retried(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(
        backend_parameters=[
            "--fail-start",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    )
    await harness.wait_for(lambda: harness.first().restart_count >= 1, "the first failed start")
    harness.clock.advance(FAST.backoff_max_seconds)  # the back-off passes: it is started again
    await harness.wait_for(lambda: harness.first().restart_count >= 2, "two failed starts")
    [instance] = harness.instances()
    assert instance.state in ("error", "starting", "pending")
    errors = [event.reason for event in harness.events() if event.to_state == "error"]
    assert any("exited with code 1 while starting" in reason for reason in errors), errors
    assert instance.diagnosis is not None and "out of memory" in instance.diagnosis.lower()


async def test_a_stop_while_the_engine_is_still_loading_does_not_wait_for_it(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(backend_parameters=["--startup-delay-s", "600"])
    await harness.wait_for(loading(harness), "starting (loading for 600 s)")
    engine = harness.engine(harness.first())
    harness.set_deployment(desired_state="stopped")
    await harness.wait_for(lambda: harness.first().state == "stopped", "stopped while loading")
    assert not engine.alive and not engine.serving


async def test_a_start_whose_log_stops_growing_is_reported_while_it_keeps_starting(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(backend_parameters=["--startup-delay-s", "600"])
    await harness.wait_for(loading(harness), "starting (loading for 600 s)")
    harness.clock.advance(FAST.stall_seconds + 1)  # the log has been silent for longer than that
    await harness.wait_for(
        lambda: "printed nothing for" in harness.first().reason, "the silent start reported"
    )
    [instance] = harness.instances()
    assert instance.state == "starting" and harness.engine(instance).alive


async def test_an_engine_that_asks_for_its_own_key_gets_it_from_readiness_and_the_gateway(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await harness.stop_then_run(backend_parameters=["--api-key", "engine-own-key"])
    await harness.wait_for(lambda: harness.running_count() == 1, "running with its key")
    [endpoint] = harness.endpoints.endpoints_for("chat")
    assert endpoint.engine_api_key == "engine-own-key"
    assert "engine-own-key" not in repr(endpoint)
    # Readiness reached an engine that refuses requests without its key.
    assert harness.engine(harness.first()).config.api_key == "engine-own-key"


async def test_cpu_engines_share_the_cores_by_their_thread_variable(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_version_field("cpu_threads_env", ["OMP_NUM_THREADS"])
    # A server whose own environment leaves the variable unset, on 5 cores (1 kept for it).
    await harness.new_controller(stop_engines=True, options=replace(FAST, cpu_cores=5), environment={})
    await harness.wait_for(lambda: harness.running_count() == 1, "restarted with its threads")
    assert harness.engine(harness.first()).env.get("OMP_NUM_THREADS") == "4"
    harness.set_deployment(replicas=2)
    await harness.wait_for(lambda: harness.running_count() == 2, "two replicas")
    second = harness.instances()[1]
    assert harness.engine(second).env.get("OMP_NUM_THREADS") == "2"  # 4 cores for engines, 2 engines
    events = [event.reason for event in harness.events() if event.instance_id == second.id]
    assert any(
        "OMP_NUM_THREADS=2: 5 usable core(s) less 1 kept for the server" in reason for reason in events
    )
    # A value the deployment sets wins.
    await harness.stop_then_run(replicas=1, env={"OMP_NUM_THREADS": "3"})
    await harness.wait_for(lambda: harness.running_count() == 1, "running with its own value")
    assert harness.engine(harness.first()).env.get("OMP_NUM_THREADS") == "3"
