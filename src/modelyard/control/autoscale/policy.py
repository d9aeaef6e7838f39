"""The autoscaling rule, as a pure function: signals over time in, desired replicas and a reason out.

No clock, no store, no engine: ``loop.py`` samples the signal, keeps the samples and the time of
the last change, and calls ``decide`` once per sample. The rule, in order:

1. **Bounds.** Replicas outside ``[min, max]`` are brought inside at once; ``min`` is raised by
   the schedule entry in force (``schedule.py``). At zero replicas, a request held by the
   gateway brings one back at once (no window, no cool-down).
   **Idle.** With a floor of 0 (``min: 0`` and no schedule minimum now), no request for
   ``idle_s`` takes the replicas to zero.
2. **Cool-down.** No change sooner than ``cooldown_s`` after the last one.
3. **Stabilisation.** The signal must have stayed on one side of the target, with a reading at
   every sample, since the last change, for the window of that side: ``stabilisation_s`` above
   it to scale up, ``scale_down_stabilisation_s`` (default twice that) below it to scale down.
   A missing reading (no replica answered) ends the streak.
4. **How many.** As Kubernetes' HPA, from the load ``replicas × value / target``: up to
   ``ceil(load)`` with the window's lowest value (at least one more replica), down to the fewest
   replicas that keep the value strictly below the target with the window's highest value
   (``floor(load) + 1``), within the bounds. A scale-up waits while replicas of the last one
   are still starting.

Usage::

    decision = decide(PolicyInput(now_s=100.0, samples=samples, desired_replicas=2,
                                  ready_replicas=2, last_change_at_s=40.0, config=config))
    decision.desired_replicas, decision.reason   # 3, "3.0 waiting per replica for 31 s > 2: 2 → 3"
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from modelyard.control.autoscale.config import METRIC_WORDS, AutoscaleConfig

# External API (the ``direction`` label of modelyard_autoscale_decisions_total; "hold" is not counted).
Direction = Literal["up", "down", "hold"]


@dataclass(frozen=True)
class Sample:
    """The deployment's signal at one instant; ``value`` None: no reading (no replica answered)."""

    at_s: float
    value: float | None


@dataclass(frozen=True)
class PolicyInput:
    now_s: float
    # Oldest first; the loop keeps at least the longest window's worth.
    samples: Sequence[Sample]
    desired_replicas: int
    # Replicas running and in rotation now (those whose signals the samples are).
    ready_replicas: int
    # When replicas last changed (by this rule or the bounds); None: not since the loop started.
    last_change_at_s: float | None
    config: AutoscaleConfig
    # Scale to zero: requests the gateway holds now for this deployment (any worker), and how
    # long no request has come (None: unknown, or one is in flight).
    held_requests: int = 0
    idle_for_s: float | None = None
    # The schedule entry in force now (``schedule.py``): its minimum and how it reads in a reason.
    schedule_minimum: int = 0
    schedule_name: str = ""

    @property
    def low(self) -> int:
        """The fewest replicas now: ``min``, raised by the schedule in force, at most ``max``."""
        return min(self.config.max, max(self.config.min, self.schedule_minimum))


@dataclass(frozen=True)
class Decision:
    desired_replicas: int
    direction: Direction
    reason: str

    @property
    def changes(self) -> bool:
        return self.direction != "hold"


def _shown(value: float, metric: str) -> str:
    return f"{value:.2f}" if metric == "kv_cache_use" else f"{value:.1f}"


def _streak(samples: Sequence[Sample], since_s: float, target: float) -> tuple[int, list[Sample]]:
    """The newest run of readings on one side of the target, after ``since_s``: (side, samples),
    side +1 above, -1 below, 0 none (no reading, or exactly at the target)."""
    run: list[Sample] = []
    side = 0
    for sample in reversed(samples):
        if sample.at_s < since_s or sample.value is None:
            break
        this_side = (sample.value > target) - (sample.value < target)
        if this_side == 0 or (side and this_side != side):
            break
        side = this_side
        run.append(sample)
    return side, run


def _bounds(policy_input: PolicyInput) -> Decision | None:
    """Replicas brought within ``low..max`` at once (a request held at zero replicas wakes one)."""
    config = policy_input.config
    desired = policy_input.desired_replicas
    low = policy_input.low
    if desired == 0 and policy_input.held_requests > 0:
        woken = max(1, low)
        return Decision(
            woken,
            "up",
            f"{policy_input.held_requests} request(s) held at the gateway while scaled to zero: 0 → {woken}",
        )
    bounded = max(low, min(config.max, desired))
    if bounded == desired:
        return None
    direction: Direction = "up" if bounded > desired else "down"
    if bounded > desired and policy_input.schedule_minimum > config.min and bounded == low:
        why = f"schedule {policy_input.schedule_name} keeps at least {low} replica(s)"
    else:
        why = f"{desired} replica(s) is outside autoscale's bounds {low}..{config.max}"
    return Decision(bounded, direction, f"{why}: {desired} → {bounded}")


def _idle(policy_input: PolicyInput) -> Decision | None:
    """Scale to zero: no request for ``idle_s`` stops the last replicas (when the floor is 0)."""
    config = policy_input.config
    desired = policy_input.desired_replicas
    idle_for_s = policy_input.idle_for_s
    if policy_input.low > 0:
        return None
    if desired == 0:
        return Decision(0, "hold", "scaled to zero: the next request starts a replica")
    if idle_for_s is None or idle_for_s < config.idle_s:
        return None
    seen = f"no request for {idle_for_s:.0f} s (idle_s {config.idle_s:g})"
    return Decision(0, "down", f"{seen}: {desired} → 0, scaled to zero")


def decide(policy_input: PolicyInput) -> Decision:
    """Desired replicas now, with the reason (also for a hold: what the rule waits for)."""
    config = policy_input.config
    desired = policy_input.desired_replicas
    for rule in (_bounds, _idle):
        decision = rule(policy_input)
        if decision is not None:
            return decision
    now = policy_input.now_s
    last_change = policy_input.last_change_at_s
    if last_change is not None and now - last_change < config.cooldown_s:
        left = config.cooldown_s - (now - last_change)
        return Decision(desired, "hold", f"cool-down: {left:.0f} s left after the last change")
    metric = config.target.metric
    target = config.target.value
    words = METRIC_WORDS[metric]
    side, run = _streak(policy_input.samples, last_change if last_change is not None else -math.inf, target)
    if side == 0:
        if policy_input.samples and policy_input.samples[-1].value is None:
            return Decision(desired, "hold", f"no reading of {words} (no ready replica answered)")
        return Decision(desired, "hold", f"{words} at the target {target:g}")
    held_s = now - run[-1].at_s
    window_s = config.stabilisation_s if side > 0 else config.down_window_s
    values = [sample.value for sample in run if sample.value is not None]
    if side > 0:
        value = min(values)
        seen = f"{_shown(value, metric)} {words} for {held_s:.0f} s > {target:g}"
    else:
        value = max(values)
        seen = f"{_shown(value, metric)} {words} for {held_s:.0f} s < {target:g}"
    if held_s < window_s:
        way = "up" if side > 0 else "down"
        return Decision(desired, "hold", f"{seen}; scales {way} after {window_s:g} s")
    # The load the window saw, in replicas at the target: value × replicas / target.
    load = desired * value / target
    if side > 0:
        if policy_input.ready_replicas < desired:
            return Decision(
                desired,
                "hold",
                f"{seen}; waiting for {desired - policy_input.ready_replicas} replica(s) to start "
                f"({policy_input.ready_replicas} of {desired} ready) before scaling further",
            )
        proposed = min(config.max, max(desired + 1, math.ceil(load - 1e-9)))
        if proposed == desired:
            return Decision(desired, "hold", f"{seen}; already at max {config.max}")
        return Decision(proposed, "up", f"{seen}: {desired} → {proposed}")
    # Down only to replicas that keep the value strictly below the target (at it, the next
    # sample would scale up again).
    low = max(1, policy_input.low)
    proposed = max(low, math.floor(load + 1e-9) + 1)
    if proposed >= desired:
        if desired == low:
            return Decision(desired, "hold", f"{seen}; already at min {low}")
        return Decision(desired, "hold", f"{seen}; {desired} replica(s) are still needed at this load")
    return Decision(proposed, "down", f"{seen}: {desired} → {proposed}")
