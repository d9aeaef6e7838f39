"""Choosing a replica: least outstanding requests, or the replica a prompt prefix belongs to.

Outstanding requests are counted per endpoint from the moment one is sent until its response,
streamed or not, is finished, in the shared counters (``shared_counters.py``): every gateway
worker adds to its own row, and a choice reads the sum, so balancing is global. Two workers
choosing at the same instant may both see the same least-busy replica: the replica chosen has
at most N−1 (N workers) more outstanding requests than the least busy one.

Least outstanding: ties go round-robin, so an idle deployment still spreads sequential requests.
A replica that refused a connection is passed over for ``REFUSED_HOLD_S`` while another one is
there: an engine that just died has no requests outstanding, so least-outstanding would otherwise
pick it first for every request until the controller notices (3.9 s after a SIGKILL on the H200).

Prefix-aware (``prefix_routing.py`` gives the ranking): the first replica of the prefix's
ranking whose load is within the bound, else least outstanding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence

from sqlalchemy import func, select

from modelyard.control.endpoints import Endpoint
from modelyard.server.gateway.prefix_routing import ranked_by_prefix
from modelyard.server.gateway.shared_counters import CounterTable
from modelyard.store.database import Database
from modelyard.store.tables import Deployment, Instance

# How long a replica that refused a connection is passed over (when another one is ready).
REFUSED_HOLD_S = 5.0


class ReplicaBalancer:
    """Least outstanding requests, round-robin among equals; prefix-aware with bounded load.

    Usage::

        endpoint = balancer.choose(registry.endpoints_for("demo"))
        balancer.acquire(endpoint)
        try:
            ...  # forward the request, relay the response
        finally:
            balancer.release(endpoint)
    """

    def __init__(self, counters: CounterTable, clock: Callable[[], float] = time.monotonic) -> None:
        self._counters = counters
        self._refused_until: dict[str, float] = {}
        self._clock = clock
        self._turn = 0

    def choose(self, endpoints: Sequence[Endpoint], exclude: Collection[str] = ()) -> Endpoint | None:
        """The endpoint with the fewest outstanding requests, skipping base URLs in ``exclude``,
        and those that refused a connection lately while another one is left."""
        count = len(endpoints)
        if count == 1:
            only = endpoints[0]
            return None if only.base_url in exclude else only
        self._turn += 1
        held = self._held() if self._refused_until else frozenset()
        total = self._counters.total
        best: Endpoint | None = None
        best_key = (True, 0)
        for offset in range(count):
            endpoint = endpoints[(self._turn + offset) % count]
            if endpoint.base_url in exclude:
                continue
            key = (endpoint.base_url in held, total(endpoint.counter_column))
            if best is None or key < best_key:
                best, best_key = endpoint, key
                if key == (False, 0):
                    break
        return best

    def choose_by_prefix(
        self,
        endpoints: Sequence[Endpoint],
        prefix_hash: int,
        load_factor: float,
        exclude: Collection[str] = (),
    ) -> Endpoint | None:
        """The prefix's replica unless taking this request puts it above ``ceil(load_factor x the
        average)``, else the least busy one; ``exclude`` and refusals as in ``choose``."""
        candidates = [e for e in endpoints if e.base_url not in exclude]
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        held = self._held() if self._refused_until else frozenset()
        total = self._counters.total
        loads = {endpoint.base_url: total(endpoint.counter_column) for endpoint in candidates}
        # Consistent hashing with bounded loads: no replica above ceil(c x average), counting this one.
        bound = math.ceil(load_factor * (sum(loads.values()) + 1) / len(candidates))
        for endpoint in ranked_by_prefix(candidates, prefix_hash):
            if endpoint.base_url not in held and loads[endpoint.base_url] + 1 <= bound:
                return endpoint
        return self.choose(candidates)

    def refused(self, endpoint: Endpoint) -> None:
        """``endpoint`` refused a connection: pass it over for a while when another is ready."""
        self._refused_until[endpoint.base_url] = self._clock() + REFUSED_HOLD_S

    def _held(self) -> frozenset[str]:
        now = self._clock()
        for base_url in [url for url, until in self._refused_until.items() if until <= now]:
            del self._refused_until[base_url]
        return frozenset(self._refused_until)

    def acquire(self, endpoint: Endpoint) -> None:
        self._counters.add(endpoint.counter_column, 1)

    def release(self, endpoint: Endpoint) -> None:
        self._counters.add(endpoint.counter_column, -1)

    def outstanding(self, endpoint: Endpoint) -> int:
        """Requests ``endpoint`` is serving now, through every gateway worker."""
        return self._counters.total(endpoint.counter_column)


# Instance states from which a replica comes by itself (an "error" only with a restart scheduled:
# one kept out of rotation by failed verification waits for the user).
_ON_ITS_WAY = frozenset({"pending", "starting"})


def describe_unready(database: Database, deployment_name: str) -> tuple[str, bool]:
    """Why a known deployment has no ready replica, e.g. ``(1 starting, 1 error)`` or ``(stopped)``,
    and whether one is on its way (an instance pending, starting, or in error awaiting its restart).

    Blocking (a database read): call it in a worker thread, and only on the 503 path.
    """
    with database.session() as session:
        desired = session.scalar(select(Deployment.desired_state).where(Deployment.name == deployment_name))
        if desired is None:
            return "", False
        if desired == "stopped":
            return f"(stopped: start it with `modelyard start {deployment_name}`)", False
        # Per state: how many instances, and how many of them have a restart scheduled.
        rows = session.execute(
            select(Instance.state, func.count(), func.count(Instance.next_start_at))
            .join(Deployment, Instance.deployment_id == Deployment.id)
            .where(Deployment.name == deployment_name)
            .group_by(Instance.state)
            .order_by(Instance.state)
        ).all()
    if not rows:
        return "(no instance yet)", True
    text = "(" + ", ".join(f"{count} {state}" for state, count, _ in rows) + ")"
    return text, any(state in _ON_ITS_WAY or restarting for state, _, restarting in rows)
