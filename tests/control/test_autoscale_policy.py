"""The autoscaling rule (``control/autoscale/policy.py``), table by table: samples over time in,
the desired replicas and the reason a user reads out. Pure: no clock, no store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.control.autoscale.policy import Decision, PolicyInput, Sample, decide

CONFIG = AutoscaleConfig.model_validate(
    {
        "min": 1,
        "max": 4,
        "target": {"metric": "waiting_per_replica", "value": 2},
        "stabilisation_s": 30,
        "cooldown_s": 60,
    }
)


def every_second(values: Sequence[float | None], *, until_s: float = 100.0) -> list[Sample]:
    """One sample a second, the last one at ``until_s``."""
    start = until_s - len(values) + 1
    return [Sample(at_s=start + offset, value=value) for offset, value in enumerate(values)]


@dataclass(frozen=True)
class Case:
    name: str
    samples: list[Sample]
    desired: int
    expected: int
    reason: str
    ready: int | None = None
    last_change_at_s: float | None = None
    config: AutoscaleConfig = CONFIG


CASES = [
    Case(
        "above for the whole window scales up",
        every_second([3.0] * 31),
        desired=2,
        expected=3,
        reason="3.0 waiting per replica for 30 s > 2: 2 → 3",
    ),
    Case(
        "above for less than the window holds",
        every_second([1.0] * 10 + [3.0] * 20),
        desired=2,
        expected=2,
        reason="3.0 waiting per replica for 19 s > 2; scales up after 30 s",
    ),
    Case(
        "one dip below the target restarts the window",
        every_second([3.0] * 20 + [1.0] + [3.0] * 10),
        desired=2,
        expected=2,
        reason="3.0 waiting per replica for 9 s > 2; scales up after 30 s",
    ),
    Case(
        "a missing reading restarts the window",
        every_second([3.0] * 20 + [None] + [3.0] * 10),
        desired=2,
        expected=2,
        reason="3.0 waiting per replica for 9 s > 2; scales up after 30 s",
    ),
    Case(
        "the lowest value of the window sizes the step (HPA's ceil(replicas × value / target))",
        every_second([9.0] * 20 + [5.0] * 11),
        desired=1,
        expected=3,
        reason="5.0 waiting per replica for 30 s > 2: 1 → 3",
    ),
    Case(
        "never above max",
        every_second([20.0] * 31),
        desired=2,
        expected=4,
        reason="20.0 waiting per replica for 30 s > 2: 2 → 4",
    ),
    Case(
        "at max it holds and says so",
        every_second([20.0] * 31),
        desired=4,
        expected=4,
        reason="20.0 waiting per replica for 30 s > 2; already at max 4",
    ),
    Case(
        "below for the scale-up window is not enough to scale down",
        every_second([0.0] * 31),
        desired=2,
        expected=2,
        reason="0.0 waiting per replica for 30 s < 2; scales down after 60 s",
    ),
    Case(
        "below for the scale-down window (twice the scale-up one) scales down",
        every_second([0.0] * 61),
        desired=3,
        expected=1,
        reason="0.0 waiting per replica for 60 s < 2: 3 → 1",
    ),
    Case(
        "a scale-down keeps the replicas the load needs",
        every_second([1.0] * 61),
        desired=4,
        expected=3,
        reason="1.0 waiting per replica for 60 s < 2: 4 → 3",
    ),
    Case(
        "a scale-down that would bring the value to the target holds (it would scale up again)",
        every_second([1.0] * 61),
        desired=2,
        expected=2,
        reason="1.0 waiting per replica for 60 s < 2; 2 replica(s) are still needed at this load",
    ),
    Case(
        "below the target but every replica still needed: holds (no flapping)",
        every_second([1.9] * 61),
        desired=2,
        expected=2,
        reason="1.9 waiting per replica for 60 s < 2; 2 replica(s) are still needed at this load",
    ),
    Case(
        "at min it holds",
        every_second([0.0] * 61),
        desired=1,
        expected=1,
        reason="0.0 waiting per replica for 60 s < 2; already at min 1",
    ),
    Case(
        "no change within the cool-down",
        every_second([9.0] * 61),
        desired=2,
        expected=2,
        last_change_at_s=70.0,
        reason="cool-down: 30 s left after the last change",
    ),
    Case(
        "after the cool-down, only samples since the last change count",
        every_second([9.0] * 61),
        desired=2,
        expected=2,
        last_change_at_s=80.0,
        config=CONFIG.model_copy(update={"cooldown_s": 10.0}),
        reason="9.0 waiting per replica for 20 s > 2; scales up after 30 s",
    ),
    Case(
        "a scale-up waits for the replicas of the last one to start",
        every_second([9.0] * 31),
        desired=2,
        expected=2,
        ready=1,
        reason=(
            "9.0 waiting per replica for 30 s > 2; waiting for 1 replica(s) to start (1 of 2 ready) "
            "before scaling further"
        ),
    ),
    Case(
        "below min is raised at once, without a window",
        [],
        desired=0,
        expected=1,
        reason="0 replica(s) is outside autoscale's bounds 1..4: 0 → 1",
    ),
    Case(
        "above max is lowered at once",
        every_second([9.0]),
        desired=6,
        expected=4,
        last_change_at_s=99.0,
        reason="6 replica(s) is outside autoscale's bounds 1..4: 6 → 4",
    ),
    Case(
        "no reading: holds and says why",
        every_second([3.0, None]),
        desired=2,
        expected=2,
        reason="no reading of waiting per replica (no ready replica answered)",
    ),
    Case(
        "KV cache use, shown as a fraction",
        every_second([0.95] * 11),
        desired=1,
        expected=2,
        config=AutoscaleConfig.model_validate(
            {"min": 1, "max": 3, "target": {"metric": "kv_cache_use", "value": 0.8}, "stabilisation_s": 10}
        ),
        reason="0.95 KV cache in use (mean of replicas) for 10 s > 0.8: 1 → 2",
    ),
    Case(
        "TTFT p90 at the gateway",
        every_second([900.0] * 6),
        desired=1,
        expected=2,
        config=AutoscaleConfig.model_validate(
            {"min": 1, "max": 3, "target": {"metric": "ttft_p90_ms", "value": 500}, "stabilisation_s": 5}
        ),
        reason="900.0 ms TTFT p90 at the gateway for 5 s > 500: 1 → 2",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_decision(case: Case) -> None:
    decision = decide(
        PolicyInput(
            now_s=100.0,
            samples=case.samples,
            desired_replicas=case.desired,
            ready_replicas=case.desired if case.ready is None else case.ready,
            last_change_at_s=case.last_change_at_s,
            config=case.config,
        )
    )
    assert (decision.desired_replicas, decision.reason) == (case.expected, case.reason)
    assert decision.changes == (case.expected != case.desired)


def run_over(values: list[float], config: AutoscaleConfig, *, start_replicas: int) -> list[Decision]:
    """The rule applied once a second to ``values``, as the loop does: the changes it made."""
    samples: list[Sample] = []
    replicas, last_change, changes = start_replicas, None, []
    for second, value in enumerate(values):
        samples.append(Sample(at_s=float(second), value=value / replicas))
        decision = decide(PolicyInput(float(second), samples, replicas, replicas, last_change, config))
        if decision.changes:
            replicas, last_change = decision.desired_replicas, float(second)
            changes.append(decision)
    return changes


def test_load_that_swings_around_the_target_makes_no_changes() -> None:
    """Total waiting alternating 1 and 6 on 2 replicas (0.5 and 3 per replica) every 5 s: never
    on one side for a whole window, so replicas stay as they are."""
    swings = ([1.0] * 5 + [6.0] * 5) * 30
    assert run_over(swings, CONFIG, start_replicas=2) == []


def test_a_burst_scales_up_once_then_down_after_the_longer_window() -> None:
    """A burst of 8 waiting for 2 minutes on 1 replica, then idle: up once the window passes,
    then (after the cool-down and the scale-down window) down again, and nothing else."""
    changes = run_over([8.0] * 120 + [0.0] * 200, CONFIG, start_replicas=1)
    assert [change.desired_replicas for change in changes] == [4, 1]
    assert changes[0].reason == "8.0 waiting per replica for 30 s > 2: 1 → 4"
    assert changes[1].reason == "0.0 waiting per replica for 60 s < 2: 4 → 1"
