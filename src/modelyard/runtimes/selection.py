"""Which runtime runs an engine: chosen per backend version (an ``image`` means Docker).

``RuntimeSet`` holds one runtime of each kind the server has; the controller asks it for the
runtime of a version when it starts an engine, and for the runtime of a kind when it re-adopts
one (the kind is recorded on the instance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from modelyard.backends.spec import BackendVersion
from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.runtimes.base import Runtime, RuntimeKind
from modelyard.runtimes.docker import DockerOptions, DockerRuntime, parse_volume
from modelyard.runtimes.process import ProcessRuntime
from modelyard.settings import Settings


@dataclass
class RuntimeSet:
    process: Runtime = field(default_factory=ProcessRuntime)
    docker: Runtime = field(default_factory=DockerRuntime)
    # Set by the server when it runs a cluster (the Ray runtime).
    ray: Runtime | None = None

    def for_version(self, version: BackendVersion) -> Runtime:
        """The runtime of ``version`` on one host; on a cluster every start goes through ``ray``,
        and this one still says what a container sees (``engine_model_path``, ``mounts``)."""
        return self.docker if version.runs_in_container else self.process

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
