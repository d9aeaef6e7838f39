"""The controller's verification decisions: a failed suite keeps an instance out of rotation, a
suite that lacked answers runs again after its delay, a wrong answer is not retried, a suite
asked for again puts a fixed engine back; on the runtime double (``conftest.py``).
Each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

from modelyard.services.deployments import request_verification

from .conftest import FAST, ControllerHarness


async def _verification_fails_on_metrics(harness: ControllerHarness) -> None:
    """Restart ``chat`` verified, with a metrics path its engine does not serve: the suite fails."""
    harness.set_version_field("metrics_path", "/no-such-metrics")
    await harness.stop_then_run(skip_verification=False)
    await harness.wait_for(lambda: harness.first().state == "error", "verification failed")


async def test_verification_run_again_puts_a_fixed_instance_back_into_rotation(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await _verification_fails_on_metrics(harness)
    [failed] = harness.instances()
    assert "verification failed, kept out of rotation" in failed.reason and "metrics" in failed.reason
    assert harness.endpoints.endpoints_for("chat") == ()
    engine = harness.engine(failed)
    harness.set_version_field("metrics_path", "/metrics")  # the user fixes the backend, then asks again
    with harness.database.session() as session:
        request_verification(session, "chat")
    harness.controller.poke()
    await harness.wait_for(lambda: harness.running_count() == 1, "running after the suite passed again")
    [fixed] = harness.instances()
    assert harness.engine(fixed) is engine  # the same engine, verified again, not restarted
    assert "verification run again on request" in fixed.reason
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "back in rotation")


async def test_a_wrong_answer_is_not_retried_and_says_what_to_do(harness: ControllerHarness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    await _verification_fails_on_metrics(harness)
    [failed] = harness.instances()
    assert "it is not retried" in failed.reason and "`modelyard verify chat`" in failed.reason
    assert failed.verification_requested_at is None


async def test_a_verification_asked_for_one_start_is_not_run_again_after_a_restart(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    harness.set_version_field("metrics_path", "/no-such-metrics")  # the suite fails on this engine
    with harness.database.session() as session:
        request_verification(session, "chat")
    harness.controller.poke()
    await harness.wait_for(lambda: harness.first().state == "error", "verification failed")
    await harness.stop_then_run()
    await harness.wait_for(lambda: harness.running_count() == 1, "running again")
    [restarted] = harness.instances()
    # The deployment skips the suite: the new start is in rotation, with no request left pending.
    assert restarted.start_count == 2 and restarted.verification_requested_at is None
    assert restarted.verification == [] and "ready" in restarted.reason


async def test_a_verification_failed_by_a_busy_engine_is_retried_and_the_instance_enters_rotation(
    harness: ControllerHarness,
) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    # The engine double answers its first 3 generation requests (the tiny chat, verify.speed,
    # verify.chat-answer) 6 s late: a CPU shared with something else while it starts. The time
    # limits stay at most 2 s, well below that and well above a normal answer on a loaded machine
    # (with a 1 s ceiling, the second attempt itself timed out on a busy CI host).
    harness.set_deployment(
        skip_verification=False,
        backend_parameters=["--slow-requests", "3", "--slow-request-extra-ms", "6000"],
    )
    retry_seconds = 10.0
    await harness.new_controller(
        stop_engines=True,
        options=replace(
            FAST,
            verification_floor_seconds=1.0,
            verification_ceiling_seconds=2.0,
            verification_retry_initial_seconds=retry_seconds,
        ),
    )
    await harness.wait_for(
        lambda: "verification attempt 1 failed" in harness.first().reason, "the first verification failed"
    )
    [waiting] = harness.instances()
    assert waiting.state == "starting"  # out of rotation, not an error: it is coming
    assert "verify.speed: no answer in time" in waiting.reason
    assert f"the suite runs again in {retry_seconds:.0f} s" in waiting.reason
    assert harness.endpoints.endpoints_for("chat") == ()
    harness.clock.advance(retry_seconds)  # the delay passes (on the controller's clock)
    await harness.wait_for(lambda: harness.running_count() == 1, "running after the second verification")
    [instance] = harness.instances()
    assert "verification passed on attempt 2" in instance.reason
    assert [endpoint.instance_id for endpoint in harness.endpoints.endpoints_for("chat")] == [instance.id]
    events = harness.events()
    [failed] = [event for event in events if "verification attempt 1 failed" in event.reason]
    [again] = [event for event in events if event.reason.startswith("verifying again (attempt 2)")]
    assert failed.id < again.id
    # Scheduled for the delay it announced (the clock stood still until the test moved it).
    scheduled = waiting.verification_requested_at
    assert scheduled is not None
    assert retry_seconds - 1 <= (scheduled - failed.at).total_seconds() <= retry_seconds
