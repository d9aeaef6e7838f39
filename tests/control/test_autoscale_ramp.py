"""Autoscaling under a ramp on CPU, beside the burst (``test_autoscale_on_load.py``): the same real
controller and loop, engines that are the SGLang double this time (the reference server playing
SGLang: ``sglang:num_queue_reqs``, ``sglang:num_running_reqs``, ``sglang:token_usage`` on its
``/metrics``, the names of SGLang's production metrics page).

Each double runs one request at a time, so N clients on R replicas leave N - R waiting (one
fewer for an instant after each answer, before that client sends again). The load rises step by
step, 1 → 4 → 8 clients, against a target of 1 waiting per replica and a maximum of 4; every
decision is checked against the rule from the value its reason names, and the count after each
step against what the rule settles on:

- 1 client: 0 waiting, 1 replica ("already at min 1");
- 4 clients: 3 (or 2) waiting on 1 replica: up to ceil(1 × 3 / 1) or ceil(2), then, at 3
  replicas, 0.33 per replica scales down to floor(3 × 0.33) + 1 = 2; it settles at 2, with 1
  per replica, at the target;
- 8 clients: 6 (or 5) waiting on 2, 3 (or 2.5) per replica, load 6 (or 5), at most 4: 2 → 4.

Every wait is on an event (a commit, a change of the endpoints, an answer), never a sleep.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from modelyard.control.autoscale.loop import AutoscaleLoop, AutoscaleOptions
from modelyard.testing.http_clients import shared_tls_context

from .conftest import ControllerHarness
from .test_autoscale_on_load import ONE_AT_A_TIME, LoadGenerator, autoscale_events, replicas

MINIMUM, MAXIMUM = 1, 4
AUTOSCALE: dict[str, Any] = {
    "min": MINIMUM,
    "max": MAXIMUM,
    "target": {"metric": "waiting_per_replica", "value": 1},
    "stabilisation_s": 0.5,
    "scale_down_stabilisation_s": 1.0,
    "cooldown_s": 0.5,
}
SGLANG_COMMAND = (
    "-m modelyard.bench.reference_server sglang --model-path {{model_path}} --host {{worker_ip}} "
    "--port {{port}} --served-model-name {{model_name}}"
)
_DECISION = re.compile(r"(\d+\.\d) waiting per replica for \d+ s ([<>]) 1: (\d+) → (\d+)")


class RampGenerator(LoadGenerator):
    """The burst's load generator, with clients added while it runs."""

    def add(self, client: httpx.AsyncClient, count: int) -> None:
        self._tasks += [asyncio.create_task(self._client(client)) for _ in range(count)]
        self.clients += count


@pytest.fixture
async def sglang_autoscaled(
    harness: ControllerHarness,
) -> AsyncIterator[tuple[ControllerHarness, AutoscaleLoop]]:
    await harness.wait_for(lambda: harness.running_count() == 1, "the first replica running")
    harness.set_version_field("run_command", SGLANG_COMMAND)
    harness.set_version_field("reasoning_field", "reasoning_content")
    await harness.stop_then_run(backend_parameters=ONE_AT_A_TIME, autoscale=AUTOSCALE)
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "one replica serving")
    [first] = harness.instances()
    assert harness.engine(first).config.flavor == "sglang", "the SGLang double serves"
    loop = AutoscaleLoop(
        database=harness.database,
        endpoints=harness.endpoints,
        poke=harness.controller.poke,
        options=AutoscaleOptions(sample_seconds=0.05),
    )
    await loop.start()
    try:
        yield harness, loop
    finally:
        await loop.shutdown()


async def _rule_says(loop: AutoscaleLoop, words: str) -> None:
    """Until the loop's last reason contains ``words`` (it samples every 50 ms)."""
    async with asyncio.timeout(30):
        while True:
            status = loop.status("chat")
            if status is not None and words in status.reason:
                return
            await asyncio.sleep(0.05)  # the loop's own sample interval: no event to await here


async def _serving(harness: ControllerHarness, load: RampGenerator, count: int) -> float:
    """Until ``count`` replicas are in rotation and each answered; when the last of them first did."""
    await harness.wait_for(lambda: replicas(harness) == count, f"{count} replicas")
    await harness.wait_for(
        lambda: len(harness.endpoints.endpoints_for("chat")) == count, f"{count} replicas in rotation"
    )
    return max([await load.answer_from(instance.id) for instance in harness.instances()])


def _rule(before: int, value: float, side: str) -> int:
    """What the rule gives from ``before`` replicas at ``value`` waiting per replica (target 1)."""
    load = before * value / 1
    if side == ">":
        return min(MAXIMUM, max(before + 1, math.ceil(load - 1e-9)))
    return max(MINIMUM, math.floor(load + 1e-9) + 1)


async def test_a_ramp_adds_replicas_step_by_step_as_the_rule_says(
    sglang_autoscaled: tuple[ControllerHarness, AutoscaleLoop],
) -> None:
    harness, loop = sglang_autoscaled
    load = RampGenerator(harness, 0)
    async with httpx.AsyncClient(timeout=30, trust_env=False, verify=shared_tls_context()) as client:
        try:
            load.add(client, 1)
            await _rule_says(loop, "already at min 1")
            assert replicas(harness) == 1

            step_two = time.monotonic()
            load.add(client, 3)
            first_new = await load.answer_from(await _next_instance(harness, 1))
            await harness.wait_for(lambda: replicas(harness) == 2, "settled at 2 replicas")
            await _rule_says(loop, "waiting per replica at the target 1")
            assert replicas(harness) == 2

            step_three = time.monotonic()
            load.add(client, 4)
            fourth_serving = await _serving(harness, load, 4)
        finally:
            await load.stop()
    print(
        f"\nramp (SGLang double), overload to the new replica serving: 1 client → 4: "
        f"{first_new - step_two:.2f} s; 4 → 8 clients, 2 → 4 replicas: {fourth_serving - step_three:.2f} s"
    )

    events = [event for event in autoscale_events(harness) if event.direction in ("up", "down")]
    assert events[-1].to_replicas == 4 and events[0].from_replicas == 1
    for event in events:
        matched = _DECISION.fullmatch(event.reason)
        assert matched, event.reason
        value, side, before, after = float(matched[1]), matched[2], int(matched[3]), int(matched[4])
        # The reason shows the value to one decimal: the rule from any value that rounds to it.
        allowed = {_rule(before, shown, side) for shown in (value - 0.049, value, value + 0.049)}
        assert before == event.from_replicas and after in allowed, event.reason
    # Never more replicas than clients (each runs one request): no scale-up beyond the load.
    assert max(event.to_replicas for event in events) <= 4


async def _next_instance(harness: ControllerHarness, index: int) -> int:
    """The id of replica ``index`` once the controller created it."""
    await harness.wait_for(lambda: len(harness.instances()) > index, f"replica {index}")
    return harness.instances()[index].id
