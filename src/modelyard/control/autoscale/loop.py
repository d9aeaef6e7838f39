"""The autoscaler's loop: once every ``sample_seconds`` it reads each autoscaled deployment's
signal (``signals.py``), asks the rule (``policy.py``) and writes what it decides.

It only ever writes ``deployments.replicas`` (with an ``autoscale_events`` row saying why) and
pokes the controller: starting, placing by memory and stopping the replicas is the controller's
ordinary reconcile (``control/reconcile.py``), exactly as after ``modelyard scale``. A replica
asked for that cannot be placed waits ``pending`` with the scheduler's reason, and is tried
again whenever GPUs or workers change; the loop records that reason once as an ``unplaced``
event, and makes no further scale-up while it waits (the rule waits for the replicas of the
last scale-up to be ready).

Scale to zero: the loop tells the registry which deployments have ``min: 0`` (``set_hold``, which
reaches every gateway worker with the endpoint snapshot); a worker holding a request for one
with no ready replica sends ``ReplicaWanted``, which the main process turns into ``wake(name)``:
the next pass runs at once and a deployment at zero replicas gets one. Idleness is read from
the gateway's counts of the deployment (``activity_source``: requests answered, in flight),
counted from the last use the store knows of when the loop first follows a deployment
(``last_activity_at``: its newest request, decision or change), so that a server restart does not
start the idle time again; the replicas the restart itself starts again are not activity.

Usage::

    loop = AutoscaleLoop(database=database, endpoints=registry, poke=controller.poke)
    await loop.start()           # a task beside the controller
    loop.status("chat")          # the last signal and the rule's last reason
    loop.wake("chat")            # a request is held for chat (scaled to zero)
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
from datetime import UTC, datetime

import httpx

from modelyard.control.autoscale.policy import Decision, PolicyInput, Sample, decide
from modelyard.control.autoscale.schedule import schedule_minimum
from modelyard.control.autoscale.signals import (
    ActivitySource,
    TtftSource,
    TtftWindow,
    read_engines,
    signal_value,
)
from modelyard.control.autoscale.store import (
    AutoscaledView,
    apply_decision,
    last_activity_at,
    load_autoscaled,
    record_unplaced,
)
from modelyard.control.endpoints import EndpointRegistry, HoldPolicy
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
    # Scale to zero: when a request last came (or was in flight), and the gateway's counts then.
    last_activity_at_s: float = 0.0
    activity_mark: tuple[int, int] | None = None
    # Followed since the loop's first pass (the server's start): replicas starting then are the
    # restart's, not a wake's, and do not hold the idle time; until the replicas change or are ready.
    resumed: bool = False


class AutoscaleLoop:
    def __init__(
        self,
        *,
        database: Database,
        endpoints: EndpointRegistry,
        poke: Callable[[], None],
        ttft_source: TtftSource | None = None,
        activity_source: ActivitySource | None = None,
        options: AutoscaleOptions | None = None,
        monotonic: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._database = database
        self._endpoints = endpoints
        self._poke = poke
        self._ttft_source = ttft_source
        self._options = options or AutoscaleOptions()
        self._monotonic = monotonic
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._activity_source = activity_source
        # Requests the gateway holds for a deployment at zero replicas, by name (wake()).
        self._wanted: dict[str, int] = {}
        self._woken = asyncio.Event()
        # Deployments whose requests the gateway holds at zero replicas (set on the registry).
        self._holding: set[str] = set()
        self._followed: dict[int, _Followed] = {}
        self._passes = 0
        self._task: asyncio.Task[None] | None = None
        self._client = httpx.AsyncClient(timeout=self._options.scrape_timeout_seconds, trust_env=False)

    def status(self, deployment_name: str) -> AutoscaleStatus | None:
        for followed in self._followed.values():
            if followed.name == deployment_name:
                return followed.status
        return None

    def wake(self, deployment_name: str) -> None:
        """A request for ``deployment_name`` is held by the gateway (any worker): if it is scaled
        to zero, a replica starts at the next pass, which comes now rather than at the next sample."""
        self._wanted[deployment_name] = self._wanted.get(deployment_name, 0) + 1
        self._woken.set()

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
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._options.sample_seconds):
                    await self._woken.wait()
            self._woken.clear()

    def _now_s(self) -> float:
        return self._monotonic() if self._monotonic is not None else asyncio.get_running_loop().time()

    async def step(self) -> list[Decision]:
        """One sample of every autoscaled deployment; the changes written."""
        views = await asyncio.to_thread(load_autoscaled, self._database)
        for gone in set(self._followed) - {view.id for view in views}:
            del self._followed[gone]
        self._publish_holds(views)
        wanted, self._wanted = self._wanted, {}
        applied = []
        for view in views:
            try:
                decision = await self._follow(view, wanted.get(view.name, 0))
            except Exception:
                logger.exception("autoscale: deployment %s failed; the others go on", view.name)
                continue
            if decision is not None:
                applied.append(decision)
        self._passes += 1
        return applied

    def _publish_holds(self, views: list[AutoscaledView]) -> None:
        """Tell the gateway which deployments scale to zero (it holds their requests while none
        is ready); a stopped, removed or no longer zero-scaled one is no longer held."""
        holding = {view.name: view for view in views if view.config.scales_to_zero}
        for name in self._holding - set(holding):
            self._endpoints.set_hold(name, None)
        for name, view in holding.items():
            policy = HoldPolicy(view.id, view.config.max_held_requests, view.config.max_hold_s)
            self._endpoints.set_hold(name, policy)
        self._holding = set(holding)

    def _idle_for_s(
        self, followed: _Followed, now: float, held_requests: int, starting: bool
    ) -> float | None:
        """Seconds since a request last came for the deployment, or since its replicas were all
        ready (a replica starting after a wake is not idle: the held requests wait for it). None:
        the gateway's counts are not known here, so the deployment never counts as idle."""
        if self._activity_source is None:
            return None
        mark = self._activity_source(followed.name)
        in_flight = mark[1] if mark is not None else 0
        if not starting:
            followed.resumed = False
        waking = starting and not followed.resumed
        if mark != followed.activity_mark or in_flight > 0 or held_requests > 0 or waking:
            followed.last_activity_at_s = now
        followed.activity_mark = mark
        return now - followed.last_activity_at_s

    async def _follow(self, view: AutoscaledView, held_requests: int = 0) -> Decision | None:
        followed = self._followed.get(view.id)
        now = self._now_s()
        if followed is None:
            followed = await self._start_following(view, now)
        minimum, schedule_name = schedule_minimum(view.config.schedule, self._wall_clock())
        if followed.known_replicas is not None and followed.known_replicas != view.replicas:
            followed.last_change_at_s = now  # set from outside (the API): a change like the rule's own
            followed.resumed = False
        endpoints = list(self._endpoints.endpoints_for(view.name))
        idle_for_s = self._idle_for_s(followed, now, held_requests, len(endpoints) < view.replicas)
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
                held_requests=held_requests,
                idle_for_s=idle_for_s,
                schedule_minimum=minimum,
                schedule_name=schedule_name,
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
                followed.resumed = False
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

    async def _start_following(self, view: AutoscaledView, now: float) -> _Followed:
        """The loop's memory of a deployment it sees for the first time: idle since the last use
        the store knows of (a request, a decision, a change), not since now."""
        last_used = await asyncio.to_thread(last_activity_at, self._database, view.id)
        idle_s = 0.0 if last_used is None else max(0.0, (self._wall_clock() - last_used).total_seconds())
        followed = _Followed(
            name=view.name,
            ttft=TtftWindow(self._options.ttft_window_seconds),
            last_activity_at_s=now - idle_s,
            # The gateway's counts as they are now: only a change from them is a new request.
            activity_mark=self._activity_source(view.name) if self._activity_source is not None else None,
            resumed=self._passes == 0,
        )
        self._followed[view.id] = followed
        return followed

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
