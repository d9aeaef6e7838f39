"""Autoscaling end to end on CPU: the real controller and autoscale loop, engines that are the vLLM
double (the reference server playing vLLM, ``modelyard.testing.runtime_double``, with its real
``vllm:num_requests_waiting`` / ``vllm:num_requests_running`` / ``vllm:kv_cache_usage_perc``
page), and a load generator sending completions to the replicas over loopback.

Each engine double runs one request at a time (``--max-concurrency 1``), so a burst of six
concurrent clients leaves five waiting on one replica (two on each of two): against a target of
1, one replica becomes two (the maximum) and stays two while the burst lasts. The windows are
short (a fraction of a second) so the test is quick; every wait is on an event (a commit, a
change of the endpoints, an answer), never a sleep.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from modelyard.control.autoscale.loop import AutoscaleLoop, AutoscaleOptions
from modelyard.control.endpoints import Endpoint
from modelyard.store.tables import AutoscaleEvent
from modelyard.testing.http_clients import shared_tls_context

from .conftest import ControllerHarness

AUTOSCALE: dict[str, Any] = {
    "min": 1,
    "max": 2,
    "target": {"metric": "waiting_per_replica", "value": 1},
    "stabilisation_s": 0.5,
    "scale_down_stabilisation_s": 1.0,
    "cooldown_s": 0.5,
}
# One request at a time, 50 ms to the first token and 10 ms for each of 5 more: ~0.1 s each.
ONE_AT_A_TIME = ["--max-concurrency", "1", "--ttft-ms", "50", "--itl-ms", "10", "--output-tokens", "5"]
CLIENTS = 6


@dataclass
class LoadGenerator:
    """``clients`` concurrent clients, each sending one completion after another to the ready
    replicas in turn; records which instance answered, and when each first did."""

    harness: ControllerHarness
    clients: int
    first_answer_at: dict[int, float] = field(default_factory=dict)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _turn: int = 0

    def _next(self) -> Endpoint | None:
        ready = self.harness.endpoints.endpoints_for("chat")
        if not ready:
            return None
        self._turn += 1
        return ready[self._turn % len(ready)]

    async def _client(self, client: httpx.AsyncClient) -> None:
        while True:
            endpoint = self._next()
            if endpoint is None:
                await asyncio.sleep(0.01)  # no replica in rotation: a client retrying
                continue
            body = {"model": endpoint.served_model_name, "prompt": "hello", "max_tokens": 5}
            try:
                response = await client.post(endpoint.base_url + "/v1/completions", json=body)
            except httpx.HTTPError:
                continue  # a replica stopped under it (the scale-down): the next one
            if response.status_code == 200:
                self.first_answer_at.setdefault(endpoint.instance_id, time.monotonic())
                self.answered.set()

    def start(self, client: httpx.AsyncClient) -> None:
        self._tasks = [asyncio.create_task(self._client(client)) for _ in range(self.clients)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def answer_from(self, instance_id: int) -> float:
        async with asyncio.timeout(30):
            while instance_id not in self.first_answer_at:
                self.answered.clear()
                await self.answered.wait()
        return self.first_answer_at[instance_id]


def autoscale_events(harness: ControllerHarness) -> list[AutoscaleEvent]:
    with harness.database.session() as session:
        return list(session.scalars(select(AutoscaleEvent).order_by(AutoscaleEvent.id)))


def replicas(harness: ControllerHarness) -> int:
    return len(harness.instances())


@pytest.fixture
async def autoscaled(harness: ControllerHarness) -> AsyncIterator[ControllerHarness]:
    """``chat`` on one-request-at-a-time engine doubles, autoscaled by a running loop."""
    await harness.wait_for(lambda: harness.running_count() == 1, "the first replica running")
    await harness.stop_then_run(backend_parameters=ONE_AT_A_TIME, autoscale=AUTOSCALE)
    await harness.wait_for(lambda: len(harness.endpoints.endpoints_for("chat")) == 1, "one replica serving")
    loop = AutoscaleLoop(
        database=harness.database,
        endpoints=harness.endpoints,
        poke=harness.controller.poke,
        options=AutoscaleOptions(sample_seconds=0.05),
    )
    await loop.start()
    try:
        yield harness
    finally:
        await loop.shutdown()


async def test_a_burst_adds_a_replica_and_idle_takes_it_away(autoscaled: ControllerHarness) -> None:
    harness = autoscaled
    load = LoadGenerator(harness, CLIENTS)
    async with httpx.AsyncClient(timeout=30, trust_env=False, verify=shared_tls_context()) as client:
        started_wall = datetime.now(UTC)
        started = time.monotonic()
        load.start(client)
        try:
            await harness.wait_for(lambda: replicas(harness) == 2, "the burst's second replica")
            await harness.wait_for(
                lambda: len(harness.endpoints.endpoints_for("chat")) == 2, "the second replica in rotation"
            )
            [first, second] = harness.instances()
            serving_at = await load.answer_from(second.id)
        finally:
            await load.stop()
        stopped_wall = datetime.now(UTC)
        print(f"\noverload to the new replica serving: {serving_at - started:.2f} s")
        await harness.wait_for(lambda: replicas(harness) == 1, "back to one replica when idle")

    up, down = autoscale_events(harness)
    assert (up.direction, up.from_replicas, up.to_replicas) == ("up", 1, 2)
    assert re.fullmatch(r"\d+\.\d waiting per replica for \d+ s > 1: 1 → 2", up.reason), up.reason
    assert (down.direction, down.from_replicas, down.to_replicas) == ("down", 2, 1)
    assert down.reason.startswith("0.0 waiting per replica for "), down.reason
    # The rule's windows: no scale-up before the signal was above for stabilisation_s, no
    # scale-down before it was below for scale_down_stabilisation_s after the load stopped.
    assert (up.at - started_wall).total_seconds() >= AUTOSCALE["stabilisation_s"]
    assert (down.at - stopped_wall).total_seconds() >= AUTOSCALE["scale_down_stabilisation_s"]
    [kept] = harness.instances()
    assert kept.id == first.id and kept.state == "running"
    stopped = [e for e in harness.events() if e.instance_id == second.id and e.to_state == "stopped"]
    assert stopped and stopped[-1].reason == "scaled down"
