"""Engines as Docker containers, through the Docker CLI (``docker run -d``, ``inspect``, ``stop``).

Each start is one named container, ``modelyard-<deployment>-<replica>-<start>-<uid>``, labelled
with the server's owner id, the launch token, the deployment, the instance and the start number,
so that re-adoption after a server restart and the orphan sweep find it by label (also one whose
``docker run`` was killed before it printed the id). What a container gets, stated:

- the model directory, read-only, at ``/models/<folder name>`` (``{{model_path}}`` is that path);
  extra volumes from the server's settings (``DockerOptions.extra_volumes``);
- host networking (the engine listens on ``{{worker_ip}}:{{port}}`` as a process would) or, with
  ``network="bridge"``, the engine on ``0.0.0.0:8000`` inside, published on a free loopback port;
- ``--ipc host`` (tensor parallelism needs shared memory), or ``--shm-size`` when set;
- ``--gpus "device=..."`` from the placement (inside, the GPUs are numbered from 0);
- the env by name (``-e NAME``: values go through the CLI's environment, never an argv);
- ``--init``, so signals reach the engine and zombies are reaped inside;
- ``--pull never``: ``docker run`` never pulls; the controller pulls before, under the version's
  pull policy, through this runtime's ``daemon`` (``runtimes/image_pull.py``, ``control/image_pulls.py``).

The container's output is copied into the per-start log file by ``docker logs -f`` (through the
log redactor when the launch has secrets, ``redacted_output.py``; restarted
with ``--since`` the log's last write when an engine is re-adopted). Stopping is ``docker stop``
with the version's grace period (SIGTERM, then SIGKILL), then ``docker rm``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.runtimes.base import (
    EngineAddress,
    EngineHandle,
    EngineIdentity,
    ExitStatus,
    FoundEngine,
    LaunchSpec,
    MarkerNames,
    Mount,
    RuntimeKind,
    StartedEngine,
    refuse_gangs,
)
from modelyard.runtimes.docker_cli import DockerCli, DockerCliError
from modelyard.runtimes.engine_ports import PortBook, PortRange, pick_port
from modelyard.runtimes.exit_memo import ExitMemo
from modelyard.runtimes.host_addresses import THIS_HOST, reachable_host
from modelyard.runtimes.image_pull import DockerDaemon
from modelyard.runtimes.log_files import open_engine_log, shown_command
from modelyard.runtimes.redacted_output import start_redactor

logger = logging.getLogger(__name__)

LABEL_MARKERS = MarkerNames(
    owner="modelyard.owner",
    launch_token="modelyard.launch-token",
    deployment="modelyard.deployment",
    instance_uid="modelyard.instance",
    replica_index="modelyard.replica",
    start_number="modelyard.start",
)
LABEL_OWNER = LABEL_MARKERS.owner
LABEL_LAUNCH_TOKEN = LABEL_MARKERS.launch_token
# Set on the containers a Ray supervisor runs on a worker (``ray_container.py``).
LABEL_RUNTIME = "modelyard.runtime"
MODEL_MOUNT_ROOT = "/models"
BRIDGE_ENGINE_PORT = 8000
GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
REDACTOR_EXIT_SECONDS = 5.0
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass(frozen=True)
class DockerOptions:
    """How containers are run on this host (server settings)."""

    network: Literal["host", "bridge"] = "host"
    # None: --ipc host. A size such as "16g": a private /dev/shm of that size instead.
    shm_size: str | None = None
    extra_volumes: tuple[Mount, ...] = field(default_factory=tuple)
    docker_executable: str = "docker"
    # ``serve --engine-ports``: the host port of every container from this range (the engine's
    # own with host networking, the published one with a bridge).
    engine_ports: PortRange | None = None
    # dockerd's address for image pulls, in DOCKER_HOST's syntax (None: $DOCKER_HOST or the default
    # socket, as the CLI finds it).
    docker_host: str | None = None


def parse_volume(text: str) -> Mount:
    """``HOST:CONTAINER[:ro|rw]`` (read-only unless ``rw``), both absolute paths."""
    parts = text.split(":")
    mode = "ro"
    if len(parts) == 3:
        mode = parts.pop()
    if len(parts) != 2 or mode not in ("ro", "rw") or not all(part.startswith("/") for part in parts):
        raise InvalidInput(
            f"docker volume {text!r} is not HOST:CONTAINER[:ro|rw] with absolute paths",
            hint="e.g. --docker-volume /data/hf-cache:/root/.cache/huggingface:rw",
        )
    return Mount(host_path=parts[0], engine_path=parts[1], read_only=mode == "ro")


def container_name(identity: EngineIdentity) -> str:
    slug = _NAME_UNSAFE.sub("-", identity.deployment).strip("-._")[:64] or "deployment"
    return f"modelyard-{slug}-{identity.replica_index}-{identity.start_number}-{identity.instance_uid[:8]}"


def _handle(container_id: str, name: str) -> EngineHandle:
    return EngineHandle(runtime="docker", id=container_id, label=f"container {name}")


def exit_status_from_state(state: dict[str, object]) -> ExitStatus | None:
    """None while the container runs; otherwise how it ended (``docker inspect``'s ``State``)."""
    if state.get("Running") or state.get("Restarting") or state.get("Status") == "created":
        return None
    raw_code = state.get("ExitCode")
    code = raw_code if isinstance(raw_code, int) else None
    details = []
    if state.get("OOMKilled"):
        details.append("the kernel's OOM killer stopped it")
    if state.get("Error"):
        details.append(str(state["Error"]))
    detail = "; ".join(details)
    if code is not None and code > 128:
        # --init (tini) exits 128+N when the engine was killed by signal N.
        return ExitStatus(exit_code=None, signal_number=code - 128, detail=detail or f"exit code {code}")
    return ExitStatus(exit_code=code, signal_number=None, detail=detail)


def container_model_path(model_path: str) -> str:
    """Where a container sees the model directory: ``/models/<folder name>``."""
    folder = Path(os.path.abspath(model_path)).name or "model"
    return f"{MODEL_MOUNT_ROOT}/{folder}"


def container_mounts(model_path: str, options: DockerOptions) -> list[Mount]:
    """The model directory read-only, then the server's extra volumes."""
    model = Mount(os.path.abspath(model_path), container_model_path(model_path), read_only=True)
    return [model, *options.extra_volumes]


def docker_run_arguments(
    spec: LaunchSpec,
    options: DockerOptions,
    executable: str,
    *,
    detach: bool = True,
    remove_on_exit: bool = False,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``docker run`` argv for ``spec``: one function for this host's Docker runtime and for
    the Ray supervisor on a worker (``detach=False``: the CLI stays attached, its output is the
    engine's and its exit code the container's; ``remove_on_exit``: ``--rm``, so that a worker's
    dockerd removes the container when it ends, also when it comes back after a crash)."""
    if spec.image is None:
        raise EngineStartFailed("the Docker runtime was given a backend version without an image")
    name = container_name(spec.identity)
    argv = [executable, "run"]
    argv += ["--detach"] if detach else []
    argv += ["--rm"] if remove_on_exit else []
    argv += ["--init", "--pull", "never", "--name", name]
    for key, value in {**LABEL_MARKERS.write(spec.identity), **(labels or {})}.items():
        argv += ["--label", f"{key}={value}"]
    if options.network == "host":
        argv += ["--network", "host"]
    else:
        address = spec.address
        argv += ["--publish", f"{address.reach_host}:{address.reach_port}:{address.port}"]
    argv += ["--shm-size", options.shm_size] if options.shm_size else ["--ipc", "host"]
    if spec.gpu_ids:
        # Docker reads --gpus as CSV: the quotes keep "device=0,1" one field.
        argv += ["--gpus", '"device=' + ",".join(str(gpu_id) for gpu_id in spec.gpu_ids) + '"']
    for env_name in spec.env:
        if env_name != GPU_VARIABLE:  # inside the container the assigned GPUs are numbered from 0
            argv += ["--env", env_name]
    for mount in container_mounts(spec.model_path, options):
        suffix = ":ro" if mount.read_only else ""
        argv += ["--volume", f"{mount.host_path}:{mount.engine_path}{suffix}"]
    if spec.program:
        argv += ["--entrypoint", spec.program[0]]
    return [*argv, spec.image, *spec.program[1:], *spec.arguments]


def container_environment(spec_env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """The Docker CLI's environment: ``--env NAME`` takes each value from here, never an argv."""
    return {**base, **{key: value for key, value in spec_env.items() if key != GPU_VARIABLE}}


@dataclass
class _FollowedContainer:
    """What this runtime holds of one container whose output it copies: the per-start log, the
    launch's secrets (masked there by a redactor between ``docker logs`` and the file), the
    ``docker logs -f`` child and that redactor's relay process."""

    log_path: Path
    secrets: frozenset[str] = frozenset()
    follower: asyncio.subprocess.Process | None = None
    relay: subprocess.Popen[bytes] | None = None


class DockerRuntime:
    """See the module docstring."""

    def __init__(
        self,
        options: DockerOptions | None = None,
        *,
        cli: DockerCli | None = None,
        exit_memo: ExitMemo | None = None,
    ) -> None:
        self._options = options or DockerOptions()
        self._cli = cli or DockerCli(self._options.docker_executable)
        # The containers whose output goes to a log file, by container id.
        self._followed: dict[str, _FollowedContainer] = {}
        # How ended containers exited (their record is removed with them), by container id.
        self._exited = exit_memo if exit_memo is not None else ExitMemo()
        self._ports = PortBook()

    @property
    def kind(self) -> RuntimeKind:
        return "docker"

    @property
    def daemon(self) -> DockerDaemon:
        """The dockerd these containers run on, where their images are pulled."""
        return DockerDaemon.from_docker_host(self._options.docker_host or os.environ.get("DOCKER_HOST"))

    def engine_model_path(self, model_path: str) -> str:
        return container_model_path(model_path)

    def mounts(self, model_path: str) -> list[Mount]:
        return container_mounts(model_path, self._options)

    async def allocate_address(self, worker_host: str, *, node_id: str | None = None) -> EngineAddress:
        port = pick_port(
            worker_host, self._options.engine_ports, held=self._ports.held(THIS_HOST), where=THIS_HOST
        )
        self._ports.hold(THIS_HOST, port)
        if self._options.network == "host":
            return EngineAddress(
                bind_host=worker_host, port=port, reach_host=reachable_host(worker_host), reach_port=port
            )
        published = port
        return EngineAddress(
            bind_host="0.0.0.0",
            port=BRIDGE_ENGINE_PORT,
            reach_host=reachable_host(worker_host),
            reach_port=published,
        )

    def run_arguments(self, spec: LaunchSpec) -> list[str]:
        """The ``docker run`` argv for ``spec`` (shown in ``ps`` and the log's first line)."""
        return docker_run_arguments(spec, self._options, self._cli.executable)

    async def start(self, spec: LaunchSpec) -> StartedEngine:
        refuse_gangs(spec, "docker")
        argv = self.run_arguments(spec)
        with open_engine_log(spec.log_path) as log_file:
            log_file.write(f"$ {shown_command(argv, spec.secrets)}\n".encode())
        environment = container_environment(spec.env, os.environ)
        try:
            output = await self._cli.run(argv[1:], env=environment)
        except DockerCliError as error:
            await self._remove_by_token(spec.identity)
            with open_engine_log(spec.log_path) as log_file:
                log_file.write(f"docker run failed: {error.message}\n".encode())
            raise EngineStartFailed(
                f"cannot start the container: {error.message}", hint=error.hint
            ) from error
        container_id = output.strip().splitlines()[-1] if output.strip() else ""
        if not container_id:
            await self._remove_by_token(spec.identity)
            raise EngineStartFailed("docker run printed no container id")
        handle = _handle(container_id, container_name(spec.identity))
        self._ports.claim(THIS_HOST, spec.address.reach_port, handle.id)
        self._followed[handle.id] = _FollowedContainer(spec.log_path, spec.secrets)
        await self._follow_logs(handle, spec.log_path, since=None)
        logger.info("started engine %s (%s)", handle.label, spec.image)
        return StartedEngine(handle=handle, command=argv)

    async def _remove_by_token(self, identity: EngineIdentity) -> None:
        """A failed ``docker run`` may still have created (or started) the container: remove it."""
        try:
            ids = await self._cli.container_ids({LABEL_LAUNCH_TOKEN: identity.launch_token})
            if ids:
                await self._cli.run(["rm", "--force", *ids])
        except DockerCliError as error:
            logger.warning("could not remove the container of a failed start: %s", error.message)

    async def _follow_logs(self, handle: EngineHandle, log_path: Path, since: float | None) -> None:
        followed = self._followed.setdefault(handle.id, _FollowedContainer(log_path))
        followed.log_path = log_path
        log_file = open_engine_log(log_path)
        arguments = ["logs", "--follow"]
        if since is not None:
            arguments += ["--since", f"{since:.9f}"]
        redactor = None
        try:
            redactor = start_redactor(log_file, followed.secrets) if followed.secrets else None
            output = log_file if redactor is None else redactor.engine_output
            followed.follower = await self._cli.spawn([*arguments, handle.id], output=output)
        finally:
            log_file.close()
            if redactor is not None:
                redactor.release()  # the follower holds the pipe; the relay ends with it
                await self._reap_relay(followed, handle.id)  # of an earlier follower of this container
                followed.relay = redactor.relay

    def host_process(self, handle: EngineHandle) -> tuple[int, float] | None:
        return None  # the engine is dockerd's (containerd's) child, in its own pid namespace

    async def exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        if (known := self._exited.get(handle.id)) is not None:
            return known
        followed = self._followed.get(handle.id)
        follower = followed.follower if followed is not None else None
        if follower is not None and follower.returncode is None:
            return None  # `docker logs -f` ends when the container does
        try:
            state = await self._cli.inspect_state(handle.id)
        except DockerCliError as error:
            if error.no_such_container:
                gone = ExitStatus(exit_code=None, signal_number=None, detail="the container is gone")
                self._exited.remember(handle.id, gone)
                return gone
            logger.warning("docker inspect %s failed: %s", handle.label, error.message)
            return None
        status = exit_status_from_state(state)
        if status is not None:
            self._exited.remember(handle.id, status)
        elif followed is not None and follower is not None:
            # The follower ended, the container did not (dockerd restarted): follow it again.
            await self.resume(handle, followed.log_path)
        return status

    async def find_engines(self, owner: str) -> list[FoundEngine]:
        try:
            ids = await self._cli.container_ids({LABEL_OWNER: owner}, include_stopped=True)
            described = await self._cli.inspect_labels(ids)
        except DockerCliError as error:
            logger.warning("cannot list containers: %s", error.message)
            return []
        return [
            FoundEngine(handle=_handle(container_id, name), identity=LABEL_MARKERS.read(labels))
            for container_id, name, labels in described
            # A Ray supervisor's container (on the server's own node, the same dockerd) is the Ray
            # runtime's: claimed here, a restarted server's orphan sweep would stop it.
            if labels.get(LABEL_RUNTIME) != "ray"
        ]

    async def resume(self, handle: EngineHandle, log_path: Path) -> None:
        try:
            since: float | None = log_path.stat().st_mtime
        except OSError:
            since = None
        await self._follow_logs(handle, log_path, since=since)
        logger.info("re-adopted engine %s", handle.label)

    async def stop(self, handle: EngineHandle, *, grace_seconds: float) -> None:
        # `docker stop` signals the container's init, which passes SIGTERM on to the engine.
        try:
            await self._cli.run(["stop", "--time", str(max(0, round(grace_seconds))), handle.id])
        except DockerCliError as error:
            if not error.no_such_container:
                logger.warning("docker stop %s failed: %s", handle.label, error.message)
        await self.exit_status(handle)  # the exit code, before the container is removed
        try:
            await self._cli.run(["rm", "--force", handle.id])
        except DockerCliError as error:
            if not error.no_such_container:
                logger.warning("docker rm %s failed: %s", handle.label, error.message)
        await self._end_follower(handle.id)
        self._ports.release(handle.id)

    async def _end_follower(self, container_id: str) -> None:
        followed = self._followed.pop(container_id, None)
        if followed is None:
            return
        if followed.follower is not None and followed.follower.returncode is None:
            followed.follower.terminate()
            await followed.follower.wait()
        await self._reap_relay(followed, container_id)

    async def _reap_relay(self, followed: _FollowedContainer, container_id: str) -> None:
        """Wait for the relay of a follower that ended (it ends at the follower's end of file)."""
        relay, followed.relay = followed.relay, None
        if relay is not None:
            try:
                await asyncio.to_thread(relay.wait, REDACTOR_EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                logger.warning("the log redactor of container %s is still running", container_id[:12])

    async def close(self) -> None:
        for container_id in list(self._followed):
            await self._end_follower(container_id)
        self._exited.clear()
