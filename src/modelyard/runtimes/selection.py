"""Which runtime runs an engine: one rule, ``RuntimeSet.for_version``.

``RuntimeSet`` holds one runtime of each kind the server has. The rule, for every backend
version a user can register and every server it can run on:

================================  ==============================  ===========================
the server                        a version with ``executable``   a version with ``image``
================================  ==============================  ===========================
one host (``modelyard serve``)    ``process``                     ``docker``
a cluster (``serve --cluster``)   ``ray`` (a process of the       ``ray`` (a container, by the
                                  worker the scheduler chose)     worker's Docker engine)
================================  ==============================  ===========================

A version no runtime of this server can run (an image with no Docker runtime) is refused with
what to do. What the engine sees of the model is a separate question with its own answer,
``engine_view``: a container sees ``/models/<folder>`` read-only wherever it runs (on this host or
a worker), a process the host's own path. The controller asks ``for_version`` when it starts an
engine, and ``by_kind`` when it re-adopts one (the kind is recorded on the instance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from modelyard.backends.spec import BackendVersion
from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.runtimes.base import Mount, Runtime, RuntimeKind
from modelyard.runtimes.docker import DockerOptions, DockerRuntime, parse_volume
from modelyard.runtimes.process import ProcessRuntime
from modelyard.settings import Settings


class EngineView(Protocol):
    """What an engine sees of the host: the model directory's path and the folders it gets."""

    def engine_model_path(self, model_path: str) -> str: ...

    def mounts(self, model_path: str) -> list[Mount]: ...


@dataclass
class RuntimeSet:
    process: Runtime = field(default_factory=ProcessRuntime)
    # None: this server runs no containers (an image version is refused with what to do).
    docker: Runtime | None = field(default_factory=DockerRuntime)
    # Set by the server when it runs a cluster (the Ray runtime).
    ray: Runtime | None = None

    def for_version(self, version: BackendVersion) -> Runtime:
        """The runtime that starts, watches and stops the engines of ``version`` on this server
        (the module docstring's table); ``EngineStartFailed`` when none of them can."""
        if self.ray is not None:
            return self.ray
        if not version.runs_in_container:
            return self.process
        return self._container_runtime(version)

    def engine_view(self, version: BackendVersion) -> EngineView:
        """What the engine of ``version`` sees of the model, wherever it runs: a container's
        ``/models/<folder>`` and mounts (the Docker runtime's settings, which the Ray supervisors
        share), or the host's paths for a process."""
        if not version.runs_in_container:
            return self.process
        return self._container_runtime(version)

    def _container_runtime(self, version: BackendVersion) -> Runtime:
        if self.docker is None:
            raise EngineStartFailed(
                f"backend version {version.version!r} runs the container image {version.image!r}, "
                f"and this server has no Docker runtime (it has: {', '.join(self.kinds())})",
                hint="run the server where Docker is installed (or with --cluster, on workers that "
                "have it), or deploy a version of the backend that names an executable",
            )
        return self.docker

    def by_kind(self, kind: str) -> Runtime:
        runtime = {"process": self.process, "docker": self.docker, "ray": self.ray}.get(kind)
        if runtime is None:
            raise EngineStartFailed(
                f"no {kind} runtime in this server",
                hint="start the server with the runtime the instance was launched on (--cluster for ray)",
            )
        return runtime

    def all(self) -> list[Runtime]:
        return [runtime for runtime in (self.process, self.docker, self.ray) if runtime is not None]

    def kinds(self) -> list[RuntimeKind]:
        return [runtime.kind for runtime in self.all()]

    @classmethod
    def from_settings(cls, settings: Settings) -> RuntimeSet:
        """The runtimes ``modelyard serve`` uses (Docker as its settings say)."""
        return cls(
            process=ProcessRuntime(engine_ports=settings.engine_ports),
            docker=DockerRuntime(docker_options(settings)),
        )


def docker_options(settings: Settings) -> DockerOptions:
    """How containers run, from the server's settings (this host's, and every worker's on a
    cluster: the Ray supervisor builds the same ``docker run``)."""
    if settings.docker_network not in ("host", "bridge"):
        raise InvalidInput(
            f"docker network {settings.docker_network!r} is not 'host' or 'bridge'",
            hint="--docker-network host (the engine on the host's network) or bridge (a published port)",
        )
    network: Literal["host", "bridge"] = "host" if settings.docker_network == "host" else "bridge"
    return DockerOptions(
        network=network,
        shm_size=settings.docker_shm_size,
        extra_volumes=tuple(parse_volume(volume) for volume in settings.docker_volumes),
        engine_ports=settings.engine_ports,
    )
