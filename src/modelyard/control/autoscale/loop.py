"""The autoscaler's loop: once every ``sample_seconds`` it reads each autoscaled deployment's
signal (``signals.py``), asks the rule (``policy.py``) and writes what it decides.

It only ever writes ``deployments.replicas`` (with an ``autoscale_events`` row saying why) and
pokes the controller: starting, placing by memory and stopping the replicas is the controller's
ordinary reconcile (``control/reconcile.py``), exactly as after ``modelyard scale``. A replica
asked for that cannot be placed waits ``pending`` with the scheduler's reason, and is tried
again whenever GPUs or workers change; the loop records that reason once as an ``unplaced``
event, and makes no further scale-up while it waits (the rule waits for the replicas of the
last scale-up to be ready).

Usage::

    loop = AutoscaleLoop(database=database, endpoints=registry, poke=controller.poke)
    await loop.start()           # a task beside the controller
    loop.status("chat")          # the last signal and the rule's last reason
    await loop.shutdown()

Tests call ``step()`` themselves or run the loop and await the events it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from modelyard.control.autoscale.policy import Decision, PolicyInput, Sample, decide
from modelyard.control.autoscale.signals import TtftSource, TtftWindow, read_engines, signal_value
from modelyard.control.autoscale.store import AutoscaledView, apply_decision, load_autoscaled, record_unplaced
from modelyard.control.endpoints import EndpointRegistry
from modelyard.control.launch import PLACEMENT_REFUSED_PREFIX
from modelyard.store.database import Database

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoscaleOptions:
    # How often each autoscaled deployment's signal is read and the rule applied.
    sample_seconds: float = 1.0
    # A replica's /metrics page that takes longer counts as no reading from it.
    scrape_timeout_seconds: float = 2.0
    # ttft_p90_ms is the p90 of the requests of this last stretch of time.
    ttft_window_seconds: float = 10.0


@dataclass(frozen=True)
class AutoscaleStatus:
    """What the loop last saw and decided for one deployment (for the API and the console)."""

    metric: str
    value: float | None
    desired_replicas: int
    ready_replicas: int
    reason: str


@dataclass
class _Followed:
    """The loop's memory of one deployment: its samples, its last change, what it reported."""

    name: str
    ttft: TtftWindow
    samples: deque[Sample] = field(default_factory=deque)
    last_change_at_s: float | None = None
    known_replicas: int | None = None
    unplaced: dict[int, str] = field(default_factory=dict)
    status: AutoscaleStatus | None = None


class AutoscaleLoop:
    def __init__(
        self,
        *,
        database: Database,
        endpoints: EndpointRegistry,
        poke: Callable[[], None],
        ttft_source: TtftSource | None = None,
        options: AutoscaleOptions | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self._database = database
        self._endpoints = endpoints
        self._poke = poke
        self._ttft_source = ttft_source
        self._options = options or AutoscaleOptions()
        self._monotonic = monotonic
        self._followed: dict[int, _Followed] = {}
        self._task: asyncio.Task[None] | None = None
        self._client = httpx.AsyncClient(timeout=self._options.scrape_timeout_seconds, trust_env=False)

    def status(self, deployment_name: str) -> AutoscaleStatus | None:
        for followed in self._followed.values():
            if followed.name == deployment_name:
                return followed.status
        return None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="modelyard-autoscale")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except Exception:
                logger.exception("autoscale pass failed; trying again at the next sample")
            await asyncio.sleep(self._options.sample_seconds)

    def _now_s(self) -> float:
        return self._monotonic() if self._monotonic is not None else asyncio.get_running_loop().time()

    async def step(self) -> list[Decision]:
        """One sample of every autoscaled deployment; the changes written."""
        views = await asyncio.to_thread(load_autoscaled, self._database)
        for gone in set(self._followed) - {view.id for view in views}:
            del self._followed[gone]
        applied = []
        for view in views:
            try:
                decision = await self._follow(view)
            except Exception:
                logger.exception("autoscale: deployment %s failed; the others go on", view.name)
                continue
            if decision is not None:
                applied.append(decision)
        return applied

    async def _follow(self, view: AutoscaledView) -> Decision | None:
        followed = self._followed.get(view.id)
        if followed is None:
            window = TtftWindow(self._options.ttft_window_seconds)
            followed = self._followed[view.id] = _Followed(name=view.name, ttft=window)
        now = self._now_s()
        if followed.known_replicas is not None and followed.known_replicas != view.replicas:
            followed.last_change_at_s = now  # set from outside (the API): a change like the rule's own
        endpoints = list(self._endpoints.endpoints_for(view.name))
        readings = await read_engines(self._client, endpoints)
        metric = view.config.target.metric
        value = signal_value(metric, readings, followed.ttft, now, self._ttft_source, view.name)
        followed.samples.append(Sample(at_s=now, value=value))
        keep_s = (
            max(view.config.stabilisation_s, view.config.down_window_s) + 2 * self._options.sample_seconds
        )
        while followed.samples and followed.samples[0].at_s < now - keep_s:
            followed.samples.popleft()
        decision = decide(
            PolicyInput(
                now_s=now,
                samples=followed.samples,
                desired_replicas=view.replicas,
                ready_replicas=len(endpoints),
                last_change_at_s=followed.last_change_at_s,
                config=view.config,
            )
        )
        followed.known_replicas = view.replicas
        written = None
        if decision.changes:
            stored = await asyncio.to_thread(
                apply_decision,
                self._database,
                view,
                decision.desired_replicas,
                decision.direction,
                decision.reason,
            )
            if stored:
                logger.info("autoscale %s: %s", view.name, decision.reason)
                followed.last_change_at_s = now
                followed.known_replicas = decision.desired_replicas
                written = decision
                self._poke()
        followed.status = AutoscaleStatus(
            metric=metric,
            value=value,
            desired_replicas=followed.known_replicas,
            ready_replicas=len(endpoints),
            reason=decision.reason,
        )
        await self._report_unplaced(view, followed)
        return written

    async def _report_unplaced(self, view: AutoscaledView, followed: _Followed) -> None:
        """Say once, per replica and reason, why a replica asked for cannot be placed."""
        waiting = {
            instance.replica_index: instance.reason
            for instance in view.instances
            if instance.replica_index < view.replicas
            and instance.state == "pending"
            and instance.reason.startswith(PLACEMENT_REFUSED_PREFIX)
        }
        for index in list(followed.unplaced):
            if index not in waiting:
                del followed.unplaced[index]
        for index, reason in sorted(waiting.items()):
            if followed.unplaced.get(index) == reason:
                continue
            followed.unplaced[index] = reason
            message = (
                f"replica {index} cannot be placed yet; the controller tries again whenever GPUs or "
                f"workers change: {reason}"
            )
            logger.warning("autoscale %s: %s", view.name, message)
            await asyncio.to_thread(record_unplaced, self._database, view, message)
