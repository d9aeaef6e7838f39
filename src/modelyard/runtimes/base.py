"""The Runtime contract: how the controller starts, watches, adopts, logs and stops engines.

An engine is known by an opaque ``EngineHandle`` (the runtime's kind and an id: a pid and its
start time, a container id, an actor). The controller never assumes a pid or 127.0.0.1: it asks
the runtime for an address, gives it the engine's argv, env, GPU ids and model path as data in a
``LaunchSpec``, and keeps the handle the runtime returns. Implementations:
``ProcessRuntime`` (child processes of this host), ``DockerRuntime`` (containers through the
Docker CLI), ``RayRuntime`` (``runtimes/ray_runtime.py``: a supervisor actor per rank on the Ray
node the scheduler chose). All of them pass the contract test suite in ``tests/runtimes/``.

Gangs. A replica may span several nodes (a multi-node vLLM or SGLang): it is one engine to the
controller, started, watched and stopped as a whole. ``LaunchSpec`` describes rank 0 (the rank
that serves HTTP, at ``address``) and ``worker_ranks`` the ranks above it, each with its node,
GPU ids and its own argv (rendered from the backend version's ``multi_node`` flags). A runtime
that runs one node (processes, Docker) refuses a spec with ``worker_ranks``; for them every
replica is a gang of one. ``exit_status`` reports the first rank that ended (its ``detail``
names the rank), and the controller then stops the whole gang and starts it again: an NCCL group
cannot heal one rank.

When each method is called (the controller is the only caller):

- ``engine_model_path`` and ``mounts``: while rendering a launch, and by the doctor's host checks
  before a deployment is stored (what the engine will see, and which host folders it gets).
- ``allocate_address``: once per start, before the argv is rendered (it fills ``{{port}}`` and
  ``{{worker_ip}}``); for a gang once more on rank 0's node for the ranks' rendezvous port.
  ``node_id`` names the cluster node (the scheduler's worker id); runtimes of one host ignore it.
- ``start``: after the instance has recorded its launch token in the store (intent before action).
  The runtime marks the engine with ``EngineIdentity`` (an env marker, container labels) so that
  ``find_engines`` finds it again even if the server dies before the handle is written.
- ``exit_status``: on every reconcile tick for every engine the controller believes alive.
- ``find_engines``: once when the server starts (re-adoption and the orphan sweep), and from time
  to time after that (orphans of a start that failed half-way).
- ``resume``: once per engine re-adopted after a server restart (e.g. follow its logs again).
- ``host_process``: after a start and a re-adoption, for the pid people see (``ps``, the API);
  the controller never reads a handle's id itself.
- ``stop``: when an instance must go; returns when nothing of the engine is left, reaped. The
  caller gives the grace period only: how to stop what the handle names is the runtime's (a
  process group or its launcher, as the start's ``stop_signal_target`` said; a container's init;
  a gang's supervisors).
- ``close``: when the server stops; engines keep running (the next server re-adopts them).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from modelyard.errors import EngineStartFailed

RuntimeKind = Literal["process", "docker", "ray"]
RUNTIME_KINDS: tuple[RuntimeKind, ...] = ("process", "docker", "ray")
SignalTarget = Literal["group", "launcher"]


@dataclass(frozen=True)
class EngineHandle:
    """An engine as its runtime knows it. ``id`` is opaque to everyone but that runtime;
    ``label`` is for people (``pid 4242``, ``container modelyard-chat-0-3``)."""

    runtime: RuntimeKind
    id: str
    label: str

    def to_json(self) -> dict[str, str]:
        return {"runtime": self.runtime, "id": self.id, "label": self.label}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineHandle:
        runtime = data.get("runtime")
        if runtime not in RUNTIME_KINDS:
            raise ValueError(f"unknown runtime {runtime!r} in an engine handle")
        return cls(runtime=runtime, id=str(data["id"]), label=str(data.get("label", data["id"])))


@dataclass(frozen=True)
class Mount:
    """A host folder the engine sees at ``engine_path`` (the same path for a process)."""

    host_path: str
    engine_path: str
    read_only: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"host_path": self.host_path, "engine_path": self.engine_path, "read_only": self.read_only}


@dataclass(frozen=True)
class EngineAddress:
    """Where the engine is told to listen (``bind_host``/``port``, the values of ``{{worker_ip}}``
    and ``{{port}}``) and where the gateway reaches it (``reach_host``/``reach_port``)."""

    bind_host: str
    port: int
    reach_host: str
    reach_port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.reach_host}]" if ":" in self.reach_host else self.reach_host
        return f"http://{host}:{self.reach_port}"


@dataclass(frozen=True)
class EngineIdentity:
    """What an engine carries so that a restarted server can find it without any other record.

    ``owner`` names the server installation (its data directory), so that two servers on one
    host never take each other's engines; ``launch_token`` is unique per start and recorded on
    the instance before the start.
    """

    owner: str
    launch_token: str
    deployment: str
    instance_uid: str
    replica_index: int
    start_number: int


@dataclass(frozen=True)
class RankLaunch:
    """One rank above 0 of a multi-node replica: where it runs and its own command line.

    ``program``/``arguments`` are complete (rank flags included: ``--node-rank 1 --headless``);
    ``env`` is laid over the spec's env (its ``CUDA_VISIBLE_DEVICES`` is this rank's GPUs)."""

    rank: int
    node_id: str
    gpu_ids: list[int]
    program: list[str]
    arguments: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MarkerNames:
    """How a runtime spells each ``EngineIdentity`` field on an engine: env variable names for a
    process, label keys for a container."""

    owner: str
    launch_token: str
    deployment: str
    instance_uid: str
    replica_index: str
    start_number: str

    def write(self, identity: EngineIdentity) -> dict[str, str]:
        return {
            self.owner: identity.owner,
            self.launch_token: identity.launch_token,
            self.deployment: identity.deployment,
            self.instance_uid: identity.instance_uid,
            self.replica_index: str(identity.replica_index),
            self.start_number: str(identity.start_number),
        }

    def read(self, markers: Mapping[str, str]) -> EngineIdentity:
        """The identity in ``markers`` (fields an older engine lacks are empty or 0)."""

        def number(name: str) -> int:
            try:
                return int(markers.get(name, "0"))
            except ValueError:
                return 0

        return EngineIdentity(
            owner=markers.get(self.owner, ""),
            launch_token=markers.get(self.launch_token, ""),
            deployment=markers.get(self.deployment, ""),
            instance_uid=markers.get(self.instance_uid, ""),
            replica_index=number(self.replica_index),
            start_number=number(self.start_number),
        )


@dataclass(frozen=True)
class LaunchSpec:
    """One engine start, as data. ``program`` is the executable (or the container entrypoint
    override, empty for the image's own), ``arguments`` follow it; nothing goes through a shell."""

    identity: EngineIdentity
    program: list[str]
    arguments: list[str]
    env: dict[str, str]
    gpu_ids: list[int]
    model_path: str
    address: EngineAddress
    log_path: Path
    working_directory: Path
    image: str | None = None
    # Values that must not appear in logs (secret flags' values, secret env values).
    secrets: frozenset[str] = field(default_factory=frozenset)
    # The cluster node of rank 0 (a worker id of the scheduler); None: this host.
    node_id: str | None = None
    # The ranks above 0 of a multi-node replica (empty: a gang of one).
    worker_ranks: tuple[RankLaunch, ...] = ()
    # Where a stop's SIGTERM goes when the engine runs as processes (the backend version's
    # ``stop_signal_target``): the whole process group, or the launcher alone, which ends its
    # children itself (SGLang). The runtime keeps it with the engine; a container's init passes
    # SIGTERM on to its engine either way.
    stop_signal_target: SignalTarget = "group"

    @property
    def rank_count(self) -> int:
        return 1 + len(self.worker_ranks)


@dataclass(frozen=True)
class StartedEngine:
    """What ``start`` returns: the handle, and the command as the runtime ran it (for ``ps``)."""

    handle: EngineHandle
    command: list[str]


@dataclass(frozen=True)
class FoundEngine:
    """An engine ``find_engines`` came across: alive, carrying ``identity`` (partly known for
    engines of older releases: ``launch_token`` may be empty)."""

    handle: EngineHandle
    identity: EngineIdentity


@dataclass(frozen=True)
class ExitStatus:
    """How an engine ended: an exit code, the signal that killed it, and what else is known."""

    exit_code: int | None
    signal_number: int | None
    detail: str = ""

    def describe(self) -> str:
        if self.signal_number is not None:
            try:
                name = signal.Signals(self.signal_number).name
            except ValueError:
                name = f"signal {self.signal_number}"
            text = f"killed by {name}"
        elif self.exit_code is None:
            text = "exited (status unknown: not our child)"
        else:
            text = f"exited with code {self.exit_code}"
        return f"{text} ({self.detail})" if self.detail else text

    @property
    def code_for_diagnosis(self) -> int | None:
        """The exit code, negative for a signal (as ``subprocess`` reports it)."""
        return -self.signal_number if self.signal_number is not None else self.exit_code


def refuse_gangs(spec: LaunchSpec, runtime: RuntimeKind) -> None:
    """What a runtime of one host says to a multi-node replica (it starts nothing)."""
    if spec.worker_ranks:
        raise EngineStartFailed(
            f"the {runtime} runtime runs engines on one host; this replica spans {spec.rank_count} nodes",
            hint="run the server with --cluster (the Ray runtime) for multi-node replicas",
        )


class Runtime(Protocol):
    """See the module docstring for when each method is called."""

    @property
    def kind(self) -> RuntimeKind: ...

    def engine_model_path(self, model_path: str) -> str:
        """The model directory's path as the engine sees it."""

    def mounts(self, model_path: str) -> list[Mount]:
        """The host folders the engine will get (none for a process: it sees the host)."""

    async def allocate_address(self, worker_host: str, *, node_id: str | None = None) -> EngineAddress:
        """A free address for one engine on ``worker_host`` (on cluster node ``node_id``)."""

    async def start(self, spec: LaunchSpec) -> StartedEngine:
        """Launch the engine (every rank of it); its output goes to ``spec.log_path``. Raises
        ``EngineStartFailed`` (with the reason) when it cannot be launched, among them a spec with
        ``worker_ranks`` given to a runtime of one host; nothing of it is left running then."""

    async def exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        """None while the engine lives; how it ended otherwise (reaping it)."""

    async def find_engines(self, owner: str) -> list[FoundEngine]:
        """Every live engine this runtime launched for ``owner``."""

    async def resume(self, handle: EngineHandle, log_path: Path) -> None:
        """Take back an engine found alive after a server restart (its logs go on to ``log_path``)."""

    def host_process(self, handle: EngineHandle) -> tuple[int, float] | None:
        """The pid and start time (seconds since the epoch) of the engine's launcher when it is a
        process of the server's host, for people; None for a container or a Ray rank."""

    async def stop(self, handle: EngineHandle, *, grace_seconds: float) -> None:
        """Ask the engine to end (SIGTERM where its start said, ``docker stop``), wait up to
        ``grace_seconds``, then kill what is left; returns when nothing of the engine is left."""

    async def close(self) -> None:
        """The server stops: release what the runtime holds (log followers), not the engines."""
