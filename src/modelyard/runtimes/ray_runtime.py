"""Engines on a Ray cluster: one supervisor actor per rank, pinned by a placement group.

A start is a gang of ``spec.rank_count`` ranks (one for a replica on one node). The runtime makes
one detached placement group for it, one bundle per rank, each bundle pinned to the node the
scheduler chose (a label selector on ``ray.io/node-id``): ``STRICT_PACK`` for one rank,
``STRICT_SPREAD`` (one node per rank) for a gang. In each bundle a detached, named
``EngineSupervisor`` actor (``ray_supervisor.py``) starts that rank's engine as a process of its
node, with the rank's GPUs in ``CUDA_VISIBLE_DEVICES``. GPUs are booked by modelyard's scheduler,
by memory, not by Ray: the bundles hold a sliver of CPU only, so that two engines may share one
GPU.

- The engine listens on its node's address (``allocate_address`` asks a task on that node for a
  free port, inside the node's ``modelyard.io/engine-ports`` range when it has one:
  ``worker join --engine-ports``, ``serve --engine-ports`` for the head); the gateway reaches it
  there.
- Logs: every rank's output is copied into the per-start log (``ray_logs.py``).
- ``exit_status``: the first rank that ended, or a supervisor that is gone (its node left the
  cluster); the controller then stops the whole gang and starts it again.
- ``find_engines``: the named actors of this owner (the names say owner, launch token, rank);
  the identity comes from the actors themselves.
- ``stop``: every rank at once (SIGTERM where the start's ``stop_signal_target`` said, which each
  supervisor keeps, grace, SIGKILL), then the actors and the placement group.
- An image backend (``spec.image``): the supervisor runs the container through its node's Docker
  engine (``ray_container.py``) with the Docker runtime's ``docker run`` argv
  (``docker.docker_run_arguments``, host networking, plus ``--rm`` and the label
  ``modelyard.runtime=ray``); one node per replica (a container gang is refused). Its image is
  made ready on that node's dockerd before (``prepare_image``: the version's pull policy and the
  registry credential the controller opened, in a task pinned to the node).

Ray is imported when the runtime is made, never at the module's import by the single-host server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from modelyard.backends.spec import PullPolicy
from modelyard.errors import EngineStartFailed, ImagePullFailed
from modelyard.runtimes.base import (
    EngineAddress,
    EngineHandle,
    EngineIdentity,
    ExitStatus,
    FoundEngine,
    LaunchSpec,
    Mount,
    RuntimeKind,
    StartedEngine,
)
from modelyard.runtimes.docker import (
    LABEL_RUNTIME,
    DockerOptions,
    container_name,
    docker_run_arguments,
)
from modelyard.runtimes.engine_ports import (
    ENGINE_PORTS_LABEL,
    NoFreeEnginePort,
    PortBook,
    PortRange,
    parse_port_range,
)
from modelyard.runtimes.exit_memo import ExitMemo
from modelyard.runtimes.image_pull import PullResult, RegistryAuth, ReportedProgress
from modelyard.runtimes.log_files import open_engine_log, shown_command
from modelyard.runtimes.ray_connection import NAMESPACE, local_node_id, require_ray
from modelyard.runtimes.ray_container import pull_image_on_this_node, worker_pull_failed
from modelyard.runtimes.ray_logs import RankLogCopier
from modelyard.runtimes.ray_names import WORKER_LABEL, GangName, parse_actor_name
from modelyard.runtimes.ray_supervisor import (
    EngineSupervisor,
    exit_status_of,
    free_port_on_this_node,
    gang_end,
    model_directory_missing,
)

logger = logging.getLogger(__name__)

NODE_ID_LABEL = "ray.io/node-id"
# What each bundle and actor holds of its node (a sliver of one CPU: GPUs are booked by memory).
BUNDLE_CPU = 0.01
PLACEMENT_TIMEOUT_SECONDS = 60.0
ACTOR_CALL_TIMEOUT_SECONDS = 30.0
# A container start waits for dockerd to make the container (``ray_container.CREATE_TIMEOUT_SECONDS``).
CONTAINER_START_TIMEOUT_SECONDS = 150.0
# A status asked every tick must not hold the pass: a rank on a node that just died may not answer.
STATUS_TIMEOUT_SECONDS = 2.0
WILDCARD_HOSTS = ("0.0.0.0", "::")


@dataclass
class _HeldGang:
    """A gang this runtime started or resumed: its actors (one per rank) and its log copier."""

    actors: list[Any]
    copier: RankLogCopier


class RayRuntime:
    """See the module docstring. The process must be connected (``ray_connection.connect``)."""

    def __init__(
        self,
        *,
        placement_timeout_seconds: float = PLACEMENT_TIMEOUT_SECONDS,
        local_engine_ports: PortRange | None = None,
        docker_options: DockerOptions | None = None,
        exit_memo: ExitMemo | None = None,
    ) -> None:
        """``local_engine_ports``: the range of the server's own node when its node has no
        ``modelyard.io/engine-ports`` label (a head started elsewhere, ``--ray-address``).
        ``docker_options``: how containers run on every node (the server's Docker settings; a
        worker's engine listens on its own address, so always host networking)."""
        require_ray()
        import ray

        self._ray = ray
        self._supervisor_class = ray.remote(EngineSupervisor)
        self._port_task = ray.remote(free_port_on_this_node)
        self._model_task = ray.remote(model_directory_missing)
        self._pull_task = ray.remote(pull_image_on_this_node)
        self._placement_timeout = placement_timeout_seconds
        self._exited = exit_memo if exit_memo is not None else ExitMemo()
        # The gangs this runtime started or resumed, by handle id.
        self._held: dict[str, _HeldGang] = {}
        self._local_engine_ports = local_engine_ports
        # Ports handed to starts, by node id; one allocation at a time per node.
        self._ports = PortBook()
        self._port_locks: dict[str, asyncio.Lock] = {}
        self._docker_options = replace(docker_options or DockerOptions(), network="host")

    @property
    def kind(self) -> RuntimeKind:
        return "ray"

    def engine_model_path(self, model_path: str) -> str:
        return model_path

    def mounts(self, model_path: str) -> list[Mount]:
        return []

    # -- where ------------------------------------------------------------------------------

    def _node_strategy(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    async def node_address(self, node_id: str | None) -> str:
        """The address of ``node_id`` (this process's node when None), as Ray knows it."""
        return str((await self._node(node_id))["NodeManagerAddress"])

    async def _node(self, node_id: str | None) -> dict[str, Any]:
        wanted = node_id or local_node_id()
        nodes = await asyncio.to_thread(self._ray.nodes)
        for node in nodes:
            if node.get("NodeID") == wanted and node.get("Alive"):
                return dict(node)
        raise EngineStartFailed(
            f"Ray node {wanted[:12]} is not in the cluster (or not alive)",
            hint="see `modelyard workers`; the instance is placed again on another worker",
        )

    def _engine_ports(self, node: dict[str, Any]) -> PortRange | None:
        """The node's engine port range: its label, else (the server's own node) the server's."""
        label = (node.get("Labels") or {}).get(ENGINE_PORTS_LABEL)
        if label:
            return parse_port_range(str(label), f"the node label {ENGINE_PORTS_LABEL}")
        return self._local_engine_ports if node.get("NodeID") == local_node_id() else None

    async def allocate_address(self, worker_host: str, *, node_id: str | None = None) -> EngineAddress:
        node = await self._node(node_id)
        wanted = str(node["NodeID"])
        node_host = str(node["NodeManagerAddress"])
        name = str((node.get("Labels") or {}).get(WORKER_LABEL) or node_host)
        bind_host = worker_host if worker_host in WILDCARD_HOSTS else node_host
        ports = self._engine_ports(node)
        task = self._port_task.options(scheduling_strategy=self._node_strategy(wanted), num_cpus=0)
        async with self._port_locks.setdefault(wanted, asyncio.Lock()):
            held = sorted(self._ports.held(wanted))
            try:
                port: int | None = await asyncio.wait_for(
                    task.remote(bind_host, None if ports is None else (ports.first, ports.last), held),
                    ACTOR_CALL_TIMEOUT_SECONDS,
                )
            except (TimeoutError, self._ray.exceptions.RayError) as error:
                raise EngineStartFailed(
                    f"cannot find a free port on Ray node {node_host}: {error}",
                    hint="check that the worker is alive (`modelyard workers`)",
                ) from error
            if port is None:
                assert ports is not None
                raise NoFreeEnginePort(
                    f"no free engine port in {ports} on worker {name}: {ports.size} in use; widen "
                    "--engine-ports",
                    hint=f"a wider range for {name} (worker join --engine-ports; serve --engine-ports "
                    "on the server's host), open in the firewall, or stop a deployment there",
                )
            self._ports.hold(wanted, port)
        return EngineAddress(bind_host=bind_host, port=port, reach_host=node_host, reach_port=port)

    async def node_names(self) -> dict[str, str]:
        """Every node's worker name (its ``modelyard.io/worker`` label, else its address), by node id."""
        nodes = await asyncio.to_thread(self._ray.nodes)
        return {
            str(node["NodeID"]): str(
                (node.get("Labels") or {}).get(WORKER_LABEL) or node.get("NodeManagerAddress")
            )
            for node in nodes
        }

    async def model_directory_problems(self, model_path: str, node_ids: list[str]) -> dict[str, str]:
        """``model_path`` missing on which of ``node_ids`` (a task pinned to each node, all at once;
        a node that does not answer in time is one of them). Only whether the directory is there:
        what is in it the doctor judged before the deployment was stored."""
        references = {
            node_id: self._model_task.options(
                scheduling_strategy=self._node_strategy(node_id), num_cpus=0
            ).remote(model_path)
            for node_id in dict.fromkeys(node_ids)
        }
        answers = await self._call_all(list(references.values()))
        problems = {}
        for node_id, answer in zip(references, answers, strict=True):
            if isinstance(answer, BaseException):
                problems[node_id] = f"the check did not answer ({type(answer).__name__})"
            elif answer is not None:
                problems[node_id] = str(answer)
        return problems

    async def _check_model_on_nodes(self, model_path: str, node_ids: list[str]) -> None:
        problems = await self.model_directory_problems(model_path, node_ids)
        if not problems:
            return
        names = await self.node_names()
        where = "; ".join(
            f"{names.get(node_id, node_id[:12])}: {problem}" for node_id, problem in problems.items()
        )
        raise EngineStartFailed(
            f"the model directory is missing on the worker this replica was placed on ({where})",
            hint=f"copy the model to {model_path} on that worker (the same path as on the server), or keep "
            "the deployment off it with a placement selector (docs/clusters.md)",
        )

    async def prepare_image(
        self,
        node_id: str,
        image: str,
        policy: PullPolicy,
        auth: RegistryAuth | None,
        on_progress: Callable[[ReportedProgress], Awaitable[None]] | None = None,
        on_pulling: Callable[[], Awaitable[None]] | None = None,
    ) -> PullResult | None:
        """Make ``image`` ready on ``node_id``'s dockerd under ``policy`` (a task pinned to the
        node, pulling with ``auth``; ``on_pulling`` once it pulls, its progress to ``on_progress``
        about once a second); None when nothing was pulled. ``ImagePullFailed`` names the image,
        the worker and the registry's answer."""
        worker = (await self.node_names()).get(node_id, node_id[:12])
        task = self._pull_task.options(
            scheduling_strategy=self._node_strategy(node_id), num_cpus=0, num_returns="streaming"
        )
        answer: dict[str, Any] = {}
        try:
            messages: Any = task.remote(image, policy, auth)  # an ObjectRefGenerator
            async for reference in messages:
                answer = await reference
                if "pulling" in answer:
                    if on_pulling is not None:
                        await on_pulling()
                    continue
                if "progress" in answer:
                    if on_progress is not None:
                        await on_progress(ReportedProgress(image, str(answer["text"]), answer["progress"]))
                    continue
                break
        except self._ray.exceptions.RayError as error:
            raise ImagePullFailed(
                f"cannot pull image {image} on worker {worker}: the pull task ended ({type(error).__name__})",
                hint="the worker may have left the cluster: see `modelyard workers`; the replica is "
                "started again (and placed again) after its back-off",
            ) from error
        if answer.get("error") or "result" not in answer:
            raise worker_pull_failed(image, worker, answer)
        result = answer["result"]
        return None if result is None else PullResult(**result)

    # -- start ------------------------------------------------------------------------------

    async def start(self, spec: LaunchSpec) -> StartedEngine:
        name = GangName(spec.identity.owner, spec.identity.launch_token, spec.rank_count)
        rank0_node = spec.node_id or local_node_id()
        ranks: list[tuple[str, list[str], dict[str, str]]] = [(rank0_node, self._rank0_argv(spec), spec.env)]
        for rank in spec.worker_ranks:
            ranks.append((rank.node_id, [*rank.program, *rank.arguments], {**spec.env, **rank.env}))
        with open_engine_log(spec.log_path) as log_file:
            for index, (_, argv, _) in enumerate(ranks):
                prefix = "$ " if index == 0 else f"[rank {index}] $ "
                log_file.write(f"{prefix}{shown_command(argv, spec.secrets)}\n".encode())
        try:
            actors = await self._create_gang(name, ranks, spec)
        except EngineStartFailed as error:
            await self._remove_gang(name)
            with open_engine_log(spec.log_path) as log_file:
                log_file.write(f"{error.message}\n".encode())
            raise
        copier = RankLogCopier(actors, spec.log_path, secrets=spec.secrets)
        copier.start()
        handle = name.handle()
        self._ports.claim(rank0_node, spec.address.port, handle.id)
        self._held[handle.id] = _HeldGang(actors, copier)
        self._exited.forget(handle.id)
        logger.info("started engine %s on %d Ray node(s)", handle.label, len(ranks))
        return StartedEngine(handle=handle, command=ranks[0][1])

    def _rank0_argv(self, spec: LaunchSpec) -> list[str]:
        """The engine's argv, or for an image backend the ``docker run`` that starts it."""
        if spec.image is None:
            return [*spec.program, *spec.arguments]
        if spec.worker_ranks:
            raise EngineStartFailed(
                "an image backend runs one container per replica; this replica spans "
                f"{spec.rank_count} nodes",
                hint="deploy it with --nodes 1, or use a backend version that runs a process for "
                "multi-node replicas",
            )
        return docker_run_arguments(
            spec,
            self._docker_options,
            "docker",  # the node's own Docker CLI, found on its PATH
            detach=False,
            remove_on_exit=True,
            labels={LABEL_RUNTIME: "ray"},
        )

    async def _create_gang(
        self, name: GangName, ranks: list[tuple[str, list[str], dict[str, str]]], spec: LaunchSpec
    ) -> list[Any]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        await self._check_model_on_nodes(spec.model_path, [node_id for node_id, _, _ in ranks])
        group = placement_group(
            [{"CPU": BUNDLE_CPU} for _ in ranks],
            strategy="STRICT_PACK" if len(ranks) == 1 else "STRICT_SPREAD",
            name=name.group,
            lifetime="detached",
            bundle_label_selector=[{NODE_ID_LABEL: node_id} for node_id, _, _ in ranks],
        )
        try:
            await asyncio.wait_for(group.ready(), self._placement_timeout)
        except (TimeoutError, self._ray.exceptions.RayError) as error:
            nodes = ", ".join(node_id[:12] for node_id, _, _ in ranks)
            raise EngineStartFailed(
                f"Ray could not place the replica's {len(ranks)} rank(s) on node(s) {nodes} within "
                f"{self._placement_timeout:.0f} s",
                hint="a node may have left the cluster: see `modelyard workers`",
            ) from error
        identity = asdict(spec.identity)
        actors: list[Any] = []
        for rank in range(len(ranks)):
            actors.append(
                self._supervisor_class.options(
                    name=name.actor(rank),
                    namespace=NAMESPACE,
                    lifetime="detached",
                    max_restarts=0,
                    num_cpus=BUNDLE_CPU,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=rank
                    ),
                ).remote(identity, rank)
            )
        if spec.image is not None:
            name_of_container = container_name(spec.identity)
            started = await self._call_all(
                [actors[0].start_container.remote(ranks[0][1], ranks[0][2], name_of_container)],
                CONTAINER_START_TIMEOUT_SECONDS,
            )
            await self._check_container_started(started[0], spec, ranks[0][0])
            return actors
        started = await self._call_all(
            [
                actor.start.remote(argv, env, str(spec.working_directory), spec.stop_signal_target)
                for actor, (_, argv, env) in zip(actors, ranks, strict=True)
            ]
        )
        for rank, result in enumerate(started):
            if isinstance(result, BaseException):
                raise EngineStartFailed(f"the supervisor of rank {rank} could not start: {result}")
            if result.get("error"):
                program = ranks[rank][1][0] if ranks[rank][1] else ""
                if result.get("not_found"):
                    raise EngineStartFailed(
                        f"executable not found: {program!r} (rank {rank})",
                        hint="install the engine on every worker, or name its full path in the version",
                    )
                raise EngineStartFailed(f"cannot launch {program!r} (rank {rank}): {result['error']}")
        return actors

    async def _check_container_started(self, result: Any, spec: LaunchSpec, node_id: str) -> None:
        """Raise what the node's Docker said when the container could not be made."""
        if not isinstance(result, BaseException) and not result.get("error"):
            return
        worker = (await self.node_names()).get(node_id, node_id[:12])
        if isinstance(result, BaseException):
            raise EngineStartFailed(
                f"the supervisor on worker {worker} could not start the container: {result}"
            )
        message = str(result["error"])
        if any(words in message.lower() for words in ("no such image", "unable to find image")):
            raise EngineStartFailed(
                f"image {spec.image} is not on worker {worker}'s Docker engine ({message})",
                hint=f"load it there (`docker load -i FILE`, or `docker pull {spec.image}` on that host); "
                "the replica is started again by itself; or keep the deployment off that worker "
                "(--worker)",
            )
        raise EngineStartFailed(
            f"cannot start the container on worker {worker}: {message}", hint=result.get("hint") or None
        )

    async def _call_all(
        self, references: list[Any], timeout: float = ACTOR_CALL_TIMEOUT_SECONDS
    ) -> list[Any]:
        async def one(reference: Any) -> Any:
            return await asyncio.wait_for(reference, timeout)

        return list(
            await asyncio.gather(*(one(reference) for reference in references), return_exceptions=True)
        )

    # -- watch ------------------------------------------------------------------------------

    def _actor(self, name: GangName, rank: int) -> Any | None:
        try:
            return self._ray.get_actor(name.actor(rank), namespace=NAMESPACE)
        except ValueError:
            return None

    async def _actors(self, name: GangName, *, cached: bool = True) -> list[Any | None]:
        held = self._held.get(name.handle().id) if cached else None
        if held is not None:
            return list(held.actors)
        return await asyncio.to_thread(lambda: [self._actor(name, rank) for rank in range(name.ranks)])

    def host_process(self, handle: EngineHandle) -> tuple[int, float] | None:
        return None  # a process of its node (``engine_pids``), not of the server's host

    async def exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        if (known := self._exited.get(handle.id)) is not None:
            return known
        name = GangName.from_handle(handle)
        actors = await self._actors(name)
        answers = await self._call_all(
            [actor.status.remote() for actor in actors if actor is not None], STATUS_TIMEOUT_SECONDS
        )
        answer_of = iter(answers)
        for rank, actor in enumerate(actors):
            answer = next(answer_of) if actor is not None else None
            status: ExitStatus | None
            if actor is None or isinstance(answer, self._ray.exceptions.RayActorError):
                status = ExitStatus(
                    exit_code=None,
                    signal_number=None,
                    detail=f"rank {rank}: its supervisor is gone (its node left the cluster)",
                )
            elif isinstance(answer, BaseException):
                logger.warning("rank %s of %s did not answer: %s", rank, handle.label, answer)
                continue
            else:
                status = exit_status_of(answer)
                if status is not None and name.ranks > 1:
                    status = ExitStatus(status.exit_code, status.signal_number, f"rank {rank}")
            if status is not None:
                self._exited.remember(handle.id, status)
                return status
        return None

    async def engine_pids(self, handle: EngineHandle) -> dict[int, int | None]:
        """The engine's pid on its node, per rank (for ``ps`` and fault tests)."""
        name = GangName.from_handle(handle)
        actors = await self._actors(name)
        answers = await self._call_all([actor.pid.remote() for actor in actors if actor is not None])
        present = [rank for rank, actor in enumerate(actors) if actor is not None]
        return {
            rank: answer if isinstance(answer, int) else None
            for rank, answer in zip(present, answers, strict=True)
        }

    async def container_name(self, handle: EngineHandle) -> str | None:
        """The container of an image backend's engine on its node (None: a process engine)."""
        actors = await self._actors(GangName.from_handle(handle))
        if not actors or actors[0] is None:
            return None
        [answer] = await self._call_all([actors[0].container_name.remote()])
        return answer if isinstance(answer, str) else None

    async def find_engines(self, owner: str) -> list[FoundEngine]:
        listed = await asyncio.to_thread(self._ray.util.list_named_actors, True)
        gangs: dict[str, tuple[GangName, int]] = {}
        for entry in listed:
            if entry.get("namespace") != NAMESPACE:
                continue
            parsed = parse_actor_name(str(entry.get("name", "")), owner)
            if parsed is None:
                continue
            name, rank = parsed
            known = gangs.get(name.launch_token)
            if known is None or rank < known[1]:
                gangs[name.launch_token] = (name, rank)
        found = []
        for name, rank in gangs.values():
            actor = await asyncio.to_thread(self._actor, name, rank)
            if actor is None:
                continue
            try:
                raw: dict[str, Any] = await asyncio.wait_for(
                    actor.identity.remote(), ACTOR_CALL_TIMEOUT_SECONDS
                )
            except (TimeoutError, self._ray.exceptions.RayError):
                continue
            raw.pop("rank", None)
            found.append(FoundEngine(handle=name.handle(), identity=EngineIdentity(**raw)))
        return found

    async def resume(self, handle: EngineHandle, log_path: Path) -> None:
        name = GangName.from_handle(handle)
        actors = await self._actors(name, cached=False)
        offsets = []
        for actor in actors:
            answer = (await self._call_all([actor.copied_bytes.remote()]))[0] if actor is not None else 0
            offsets.append(answer if isinstance(answer, int) else 0)
        copier = RankLogCopier(actors, log_path, offsets)
        copier.start()
        self._held[handle.id] = _HeldGang(actors, copier)
        logger.info("re-adopted engine %s", handle.label)

    # -- stop -------------------------------------------------------------------------------

    async def stop(self, handle: EngineHandle, *, grace_seconds: float) -> None:
        name = GangName.from_handle(handle)
        actors = [actor for actor in await self._actors(name) if actor is not None]
        stops = [actor.stop.remote(grace_seconds) for actor in actors]
        results = await asyncio.gather(
            *(asyncio.wait_for(stop, grace_seconds + ACTOR_CALL_TIMEOUT_SECONDS) for stop in stops),
            return_exceptions=True,
        )
        if self._exited.get(handle.id) is None:
            self._exited.remember(handle.id, gang_end(results, name.ranks))
        held = self._held.pop(handle.id, None)
        if held is not None:
            await held.copier.close(drain=True)
        await self._call_all([actor.forget_log.remote() for actor in actors])
        await self._remove_gang(name)
        self._ports.release(handle.id)

    async def _remove_gang(self, name: GangName) -> None:
        """Kill the gang's actors and remove its placement group; wait until their names are free."""
        from ray.util.placement_group import remove_placement_group

        def remove() -> None:
            for rank in range(name.ranks):
                actor = self._actor(name, rank)
                if actor is not None:
                    with contextlib.suppress(Exception):
                        self._ray.kill(actor, no_restart=True)
            with contextlib.suppress(Exception):
                group = self._ray.util.get_placement_group(name.group)
                remove_placement_group(group)

        await asyncio.to_thread(remove)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACTOR_CALL_TIMEOUT_SECONDS
        while loop.time() < deadline:
            left = await self._actors(name, cached=False)
            if all(actor is None for actor in left):
                return
            await asyncio.sleep(0.05)
        logger.warning(
            "the actors of %s were still named after %.0f s", name.group, ACTOR_CALL_TIMEOUT_SECONDS
        )

    async def close(self) -> None:
        for held in list(self._held.values()):
            await held.copier.close(drain=True)
        self._held.clear()
        self._exited.clear()
