"""Whether a host can run container backends: a Docker engine that answers, and whether its
containers can get GPUs (the NVIDIA runtime, or CDI specs).

``worker join`` (and ``serve --cluster`` for the head's own node) asks ``docker info`` once and
records the answer on its Ray node as two labels, so that the server knows it for every worker
without asking again: ``modelyard.io/docker`` (``ready``, ``unreachable``, ``not-installed``)
and ``modelyard.io/docker-gpus`` (``nvidia``, ``cdi``, ``none``). Placement refuses an image
backend on a worker whose labels say it cannot run it (``container_refusal``); a node without
the labels (a head started elsewhere) is not judged here (the doctor checks the server's own
Docker before a deployment is stored).

Usage::

    capability = DockerCapability.detect()
    labels = capability.labels()                      # given to ray start --labels
    DockerCapability.from_labels(worker.labels)       # on the server
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

DOCKER_LABEL = "modelyard.io/docker"
DOCKER_GPUS_LABEL = "modelyard.io/docker-gpus"
DETECT_TIMEOUT_SECONDS = 5.0

DockerEngineState = Literal["ready", "unreachable", "not-installed"]
DockerGpuSupport = Literal["nvidia", "cdi", "none"]
_ENGINE_STATES: tuple[DockerEngineState, ...] = ("ready", "unreachable", "not-installed")
_GPU_SUPPORTS: tuple[DockerGpuSupport, ...] = ("nvidia", "cdi", "none")


@dataclass(frozen=True)
class DockerCapability:
    """What a host's Docker can do; ``detail`` (why it cannot) is known on that host only."""

    engine: DockerEngineState
    gpus: DockerGpuSupport = "none"
    detail: str | None = None

    @classmethod
    def detect(
        cls, executable: str = "docker", timeout_seconds: float = DETECT_TIMEOUT_SECONDS
    ) -> DockerCapability:
        """This host's Docker, through ``docker info`` (the doctor's reading of it)."""
        from modelyard.doctor.host_sources import DockerCliSource

        info = DockerCliSource(executable, timeout_seconds).read_info()
        if not info.available:
            reason = info.unavailable_reason or "docker info failed"
            state: DockerEngineState = "not-installed" if "is not on PATH" in reason else "unreachable"
            return cls(engine=state, detail=reason)
        if "nvidia" in info.runtimes:
            return cls(engine="ready", gpus="nvidia")
        if info.cdi_spec_dirs:
            return cls(engine="ready", gpus="cdi")
        runtimes = ", ".join(info.runtimes) or "none"
        return cls(engine="ready", gpus="none", detail=f"runtimes: {runtimes}")

    def labels(self) -> dict[str, str]:
        return {DOCKER_LABEL: self.engine, DOCKER_GPUS_LABEL: self.gpus}

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> DockerCapability | None:
        """The capability a node's labels record; None when they record none."""
        engine = labels.get(DOCKER_LABEL)
        gpus = labels.get(DOCKER_GPUS_LABEL, "none")
        if engine not in _ENGINE_STATES:
            return None
        return cls(
            engine=_ENGINE_STATES[_ENGINE_STATES.index(engine)],
            gpus=_GPU_SUPPORTS[_GPU_SUPPORTS.index(gpus)] if gpus in _GPU_SUPPORTS else "none",
        )

    def summary(self) -> str:
        """For people: ``ready, NVIDIA runtime``, ``ready, no GPU runtime``, ``unreachable``."""
        if self.engine != "ready":
            return self.engine.replace("-", " ")
        return {"nvidia": "ready, NVIDIA runtime", "cdi": "ready, CDI", "none": "ready, no GPU runtime"}[
            self.gpus
        ]

    def to_json(self) -> dict[str, str]:
        return {"engine": self.engine, "gpus": self.gpus}


def container_refusal(
    worker_name: str, labels: Mapping[str, str], *, needs_gpus: bool, server_node: bool = False
) -> str | None:
    """Why an image backend cannot run on this worker, from what its join recorded; None: it
    can, or nothing was recorded."""
    capability = DockerCapability.from_labels(labels)
    if capability is None:
        return None
    again = "restart `modelyard serve --cluster`" if server_node else "re-join"
    when = "when its Ray head started" if server_node else "when it joined"
    if capability.engine == "not-installed":
        return (
            f"worker {worker_name} has no Docker engine (no docker command there {when}): "
            f"install docker.io and {again}, or use a process backend"
        )
    if capability.engine == "unreachable":
        return (
            f"worker {worker_name} has no Docker engine (its Docker daemon did not answer {when}): "
            f"start dockerd there (check DOCKER_HOST) and {again}, or use a process backend"
        )
    if needs_gpus and capability.gpus == "none":
        return (
            f"worker {worker_name}'s Docker has no NVIDIA runtime, so containers there cannot see its "
            "GPUs: install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker, "
            f"then restart dockerd) and {again}, or use a process backend"
        )
    return None
