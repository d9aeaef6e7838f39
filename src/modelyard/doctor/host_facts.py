"""What an engine will find where it starts, beyond its GPUs: facts the plan checks look at.

The engine inherits the server's environment (proxies, ``HF_*`` variables), runs with the shared
memory of its host or container (NCCL puts its buffers in ``/dev/shm``), talks to the NVIDIA
driver, and listens on a port. ``HostFacts.of_this_host()`` reads them here; a described host
(``HostFacts(in_container=True, shm_bytes=64 << 20)``) plans for another one.

Usage::

    facts = HostFacts.of_this_host()
    facts.shm_bytes, facts.driver_version, facts.environment.get("HTTPS_PROXY")
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SHM_PATH = Path("/dev/shm")


@dataclass(frozen=True)
class HostFacts:
    """The machine (or container) an engine starts in. Every field is optional."""

    # The engine runs inside a container (its /dev/shm is the container's).
    in_container: bool = False
    shm_bytes: int | None = None
    driver_version: str | None = None
    ports_in_use: frozenset[int] = frozenset()
    # Variables the engine inherits from the process that starts it.
    environment: Mapping[str, str] = field(default_factory=dict)
    # The Hugging Face hub cache, to tell whether a hub id is there for an offline start.
    hub_cache_dir: Path | None = None

    @classmethod
    def of_this_host(cls, *, driver_version: str | None = None) -> HostFacts:
        """This host as the local runtime starts engines on it."""
        try:
            stats = os.statvfs(SHM_PATH)
            shm_bytes: int | None = stats.f_blocks * stats.f_frsize
        except OSError:
            shm_bytes = None
        environment = dict(os.environ)
        return cls(
            in_container=Path("/.dockerenv").exists(),
            shm_bytes=shm_bytes,
            driver_version=driver_version,
            environment=environment,
            hub_cache_dir=hub_cache_dir(environment),
        )


def hub_cache_dir(environment: Mapping[str, str]) -> Path:
    """Where huggingface_hub keeps downloads: ``HF_HUB_CACHE``, ``HF_HOME/hub``, or ``~/.cache``."""
    if environment.get("HF_HUB_CACHE"):
        return Path(environment["HF_HUB_CACHE"]).expanduser()
    if environment.get("HF_HOME"):
        return Path(environment["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()
