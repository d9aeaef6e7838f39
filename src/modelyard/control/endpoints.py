"""The ready engine endpoints, published by the controller and read by the gateway.

The controller calls ``publish`` whenever it looks at a deployment (every reconcile tick) and
``forget`` when a deployment is removed; the deployments API calls ``set_routing`` and
``set_limits``. A publish that
changes nothing is ignored; every real change bumps ``version`` and calls the subscribers, which
is how the endpoint set reaches the gateway workers (``server/gateway/supervisor.py`` sends the
whole ``snapshot()`` to each one; a worker ``load``\\ s it into its own registry). The gateway
reads ``endpoints_for`` on every request and never touches the database on the hot path.

Everything runs in one event loop per process, so no lock is needed.

Usage::

    registry = EndpointRegistry()
    registry.subscribe(lambda: print("changed to version", registry.version))
    registry.publish("demo", [Endpoint("demo", 1, "http://127.0.0.1:40123", "demo")])
    registry.endpoints_for("demo")[0].counter_column   # its column in the shared counters
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from modelyard.backends.spec import DEFAULT_API_PATHS

RoutingPolicy = Literal["least-outstanding", "prefix"]
ROUTING_POLICIES: tuple[RoutingPolicy, ...] = get_args(RoutingPolicy)
DEFAULT_ROUTING: RoutingPolicy = "least-outstanding"

# Columns of the shared outstanding-request counters (one per endpoint ever seen, reused when freed).
ENDPOINT_COLUMNS = 4096


@dataclass(frozen=True)
class DeploymentLimits:
    """A deployment's limits for every key together (None: no limit of that kind), checked by the
    gateway (``server/gateway/limits.py``) in the counters of ``deployment_id``."""

    deployment_id: int
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None

    @property
    def any(self) -> bool:
        return any(
            value is not None
            for value in (self.requests_per_minute, self.tokens_per_minute, self.max_concurrent_requests)
        )

    def to_json(self) -> list[int | None]:
        return [
            self.deployment_id,
            self.requests_per_minute,
            self.tokens_per_minute,
            self.max_concurrent_requests,
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> DeploymentLimits:
        deployment_id, requests_per_minute, tokens_per_minute, max_concurrent_requests = data
        return cls(int(deployment_id), requests_per_minute, tokens_per_minute, max_concurrent_requests)


@dataclass(frozen=True)
class Endpoint:
    """One ready engine replica that can take requests for a deployment."""

    deployment_name: str
    instance_id: int
    # e.g. "http://127.0.0.1:40123" (no trailing slash, no /v1)
    base_url: str
    # The "model" value the engine itself accepts (vLLM/SGLang: the deployment name through
    # --served-model-name; transformers serve: the model path it was started with).
    served_model_name: str
    # Where the engine puts reasoning text in its deltas/messages: "reasoning" or "reasoning_content".
    reasoning_field: str = "reasoning_content"
    # Which engine serves it (the backend's family: vllm, sglang, transformers, custom) and its
    # version, shown to clients in /v1/models so that benchmarks can record what they measured.
    engine: str = "custom"
    engine_version: str = ""
    # The engine's Prometheus path (re-exported by /metrics), None when it has none.
    metrics_path: str | None = None
    # The /v1 routes the engine serves (from its backend version); others get a 404 naming it.
    api_paths: tuple[str, ...] = DEFAULT_API_PATHS
    # Set by the registry: this endpoint's column in the gateway's shared counters.
    counter_column: int = -1
    # The key the engine itself asks for (its --api-key), sent upstream instead of the client's
    # modelyard key; never shown (it travels to the gateway workers over their private channel).
    engine_api_key: str | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["api_paths"] = list(self.api_paths)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(**{**data, "api_paths": tuple(data.get("api_paths", DEFAULT_API_PATHS))})

    def _identity(self) -> tuple[str, int, str]:
        return (self.deployment_name, self.instance_id, self.base_url)


@dataclass(frozen=True)
class HoldPolicy:
    """Scale to zero: while a deployment with ``autoscale.min: 0`` has no ready replica, the
    gateway holds up to ``max_held_requests`` of its requests (over every worker, counted at
    ``deployment_id``'s slot of the shared counters) for up to ``max_hold_s`` each."""

    deployment_id: int
    max_held_requests: int
    max_hold_s: float

    def to_json(self) -> list[int | float]:
        return [self.deployment_id, self.max_held_requests, self.max_hold_s]

    @classmethod
    def from_json(cls, data: list[Any]) -> HoldPolicy:
        deployment_id, max_held_requests, max_hold_s = data
        return cls(int(deployment_id), int(max_held_requests), float(max_hold_s))


@dataclass(frozen=True)
class DeploymentNote:
    """Why a name the gateway will know is not a deployment yet."""

    message: str
    # True while it is on its way (clients are told to retry after a few seconds).
    coming: bool = True


@dataclass(frozen=True)
class RegistrySnapshot:
    """Everything a gateway worker needs to route: sent whole on every change."""

    version: int
    # deployment name -> its ready endpoints (empty: known, none ready)
    endpoints: dict[str, tuple[Endpoint, ...]]
    routing: dict[str, RoutingPolicy]
    notes: dict[str, DeploymentNote] = field(default_factory=dict)
    limits: dict[str, DeploymentLimits] = field(default_factory=dict)
    holds: dict[str, HoldPolicy] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "holds": {name: hold.to_json() for name, hold in self.holds.items()},
            "version": self.version,
            "endpoints": {name: [e.to_json() for e in items] for name, items in self.endpoints.items()},
            "routing": dict(self.routing),
            "notes": {name: [note.message, note.coming] for name, note in self.notes.items()},
            "limits": {name: limits.to_json() for name, limits in self.limits.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RegistrySnapshot:
        return cls(
            version=int(data["version"]),
            endpoints={
                name: tuple(Endpoint.from_json(item) for item in items)
                for name, items in data["endpoints"].items()
            },
            routing={name: policy for name, policy in data["routing"].items() if policy in ROUTING_POLICIES},
            notes={
                name: DeploymentNote(str(message), bool(coming))
                for name, (message, coming) in data.get("notes", {}).items()
            },
            limits={name: DeploymentLimits.from_json(item) for name, item in data.get("limits", {}).items()},
            holds={name: HoldPolicy.from_json(item) for name, item in data.get("holds", {}).items()},
        )


@dataclass
class EndpointRegistry:
    """Ready endpoints by deployment name, the known deployment names and their routing policies."""

    _endpoints: dict[str, tuple[Endpoint, ...]] = field(default_factory=dict)
    _routing: dict[str, RoutingPolicy] = field(default_factory=dict)
    _limits: dict[str, DeploymentLimits] = field(default_factory=dict)
    # Deployments that scale to zero: their requests are held while none is ready (set by the autoscaler).
    _holds: dict[str, HoldPolicy] = field(default_factory=dict)
    # Names that are not deployments yet, with what the gateway tells clients meanwhile
    # (e.g. "demo is being prepared (42%)").
    _notes: dict[str, DeploymentNote] = field(default_factory=dict)
    _subscribers: list[Callable[[], None]] = field(default_factory=list)
    # Endpoint identity -> column, and the free columns (least recently freed first).
    _columns: dict[tuple[str, int, str], int] = field(default_factory=dict)
    _free_columns: OrderedDict[int, None] = field(
        default_factory=lambda: OrderedDict.fromkeys(range(ENDPOINT_COLUMNS))
    )
    version: int = 0

    # -- what the controller and the API call -------------------------------------------------

    def publish(self, deployment_name: str, endpoints: list[Endpoint]) -> None:
        """Replace the ready endpoints of one deployment (an empty list: none ready)."""
        placed = tuple(self._with_column(endpoint) for endpoint in endpoints)
        if self._endpoints.get(deployment_name) == placed:
            return
        previous = self._endpoints.get(deployment_name, ())
        self._endpoints[deployment_name] = placed
        self._free_unused(previous)
        self._changed()

    def forget(self, deployment_name: str) -> None:
        """The deployment was removed: its name is no longer known to the gateway."""
        if not any(deployment_name in known for known in (self._endpoints, self._routing, self._limits)):
            return
        previous = self._endpoints.pop(deployment_name, ())
        self._routing.pop(deployment_name, None)
        self._limits.pop(deployment_name, None)
        self._holds.pop(deployment_name, None)
        self._free_unused(previous)
        self._changed()

    def set_routing(self, deployment_name: str, policy: RoutingPolicy) -> None:
        """How the gateway picks a replica of this deployment (kept until ``forget``)."""
        if self._routing.get(deployment_name, DEFAULT_ROUTING) == policy:
            self._routing[deployment_name] = policy
            return
        self._routing[deployment_name] = policy
        self._changed()

    def set_limits(self, deployment_name: str, limits: DeploymentLimits) -> None:
        """The deployment's limits for every key together (kept until ``forget``)."""
        if not limits.any:
            if self._limits.pop(deployment_name, None) is not None:
                self._changed()
            return
        if self._limits.get(deployment_name) != limits:
            self._limits[deployment_name] = limits
            self._changed()

    def set_hold(self, deployment_name: str, policy: HoldPolicy | None) -> None:
        """Hold the deployment's requests while no replica is ready (scale to zero); None: answer
        them at once, as for any deployment. Only for a deployment the registry knows."""
        if policy is None:
            if self._holds.pop(deployment_name, None) is not None:
                self._changed()
            return
        if deployment_name in self._endpoints and self._holds.get(deployment_name) != policy:
            self._holds[deployment_name] = policy
            self._changed()

    def set_note(self, name: str, message: str, *, coming: bool = True) -> None:
        """``name`` is not a deployment yet: until it is, the gateway answers 503 with ``message``."""
        note = DeploymentNote(message, coming)
        if self._notes.get(name) != note:
            self._notes[name] = note
            self._changed()

    def clear_note(self, name: str) -> None:
        if self._notes.pop(name, None) is not None:
            self._changed()

    def note_for(self, name: str) -> DeploymentNote | None:
        return self._notes.get(name)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (in this event loop) after every change."""
        self._subscribers.append(callback)

    # -- what the gateway reads ------------------------------------------------------------------

    def endpoints_for(self, deployment_name: str) -> tuple[Endpoint, ...]:
        return self._endpoints.get(deployment_name, ())

    def is_known(self, deployment_name: str) -> bool:
        return deployment_name in self._endpoints

    def known_deployments(self) -> list[str]:
        return sorted(self._endpoints)

    def routing_for(self, deployment_name: str) -> RoutingPolicy:
        return self._routing.get(deployment_name, DEFAULT_ROUTING)

    def limits_for(self, deployment_name: str) -> DeploymentLimits | None:
        return self._limits.get(deployment_name)

    def hold_for(self, deployment_name: str) -> HoldPolicy | None:
        return self._holds.get(deployment_name)

    def all_endpoints(self) -> list[Endpoint]:
        return [endpoint for endpoints in self._endpoints.values() for endpoint in endpoints]

    # -- between processes ---------------------------------------------------------------------

    def snapshot(self) -> RegistrySnapshot:
        return RegistrySnapshot(
            version=self.version,
            endpoints=dict(self._endpoints),
            routing=dict(self._routing),
            notes=dict(self._notes),
            limits=dict(self._limits),
            holds=dict(self._holds),
        )

    def load(self, snapshot: RegistrySnapshot) -> None:
        """Become a copy of another process's registry (a gateway worker's, from the main one)."""
        self._endpoints = dict(snapshot.endpoints)
        self._routing = dict(snapshot.routing)
        self._notes = dict(snapshot.notes)
        self._limits = dict(snapshot.limits)
        self._holds = dict(snapshot.holds)
        self.version = snapshot.version
        for callback in self._subscribers:
            callback()

    # -- columns -------------------------------------------------------------------------------

    def _with_column(self, endpoint: Endpoint) -> Endpoint:
        identity = endpoint._identity()
        column = self._columns.get(identity)
        if column is None:
            column, _ = self._free_columns.popitem(last=False) if self._free_columns else (-1, None)
            if column < 0:
                raise RuntimeError(f"more than {ENDPOINT_COLUMNS} endpoints at once: raise ENDPOINT_COLUMNS")
            self._columns[identity] = column
        if endpoint.counter_column == column:
            return endpoint
        return dataclasses.replace(endpoint, counter_column=column)

    def _free_unused(self, previous: tuple[Endpoint, ...]) -> None:
        in_use = {endpoint._identity() for endpoint in self.all_endpoints()}
        for endpoint in previous:
            identity = endpoint._identity()
            if identity not in in_use and identity in self._columns:
                # Requests still in flight on it release the same column; reusing the column
                # that was freed longest ago keeps that overlap rare.
                self._free_columns[self._columns.pop(identity)] = None

    def _changed(self) -> None:
        self.version += 1
        for callback in self._subscribers:
            callback()
