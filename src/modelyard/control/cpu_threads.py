"""How many threads a CPU engine gets: its share of the host's usable cores.

torch (and so transformers serve) starts one thread per core by default, and every engine on the
host does. Under contention (the server itself, another engine, anything else busy) an OpenMP
pool with more threads than free cores waits at each barrier for its descheduled thread: the
demo model answered 32 tokens 4-6x slower with torch's default 2 threads than with 1 on a 2-core
VM with one core busy. So a CPU engine whose backend version names ``cpu_threads_env`` gets,
in those variables, the usable cores less one kept for the server, divided by the CPU engines on
the host (this one included), at least 1. A value the deployment's env or the server's own
environment gives wins: the user knows their host.

    threads_for(usable_cores=16, cpu_engines=2)  # 7: 15 cores for engines, 2 engines
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_for(*, usable_cores: int, cpu_engines: int) -> int:
    """One engine's threads: (cores - 1 kept for the server) / CPU engines, at least 1."""
    for_engines = usable_cores - 1 if usable_cores > 1 else 1
    return max(1, for_engines // max(1, cpu_engines))


@dataclass(frozen=True)
class ThreadSizing:
    """The variables set for one launch, and why (for the instance's reason)."""

    env: dict[str, str]
    threads: int
    usable_cores: int
    cpu_engines: int

    def describe(self) -> str:
        names = ", ".join(f"{name}={value}" for name, value in self.env.items())
        kept = " less 1 kept for the server" if self.usable_cores > 1 else ""
        return (
            f"{names}: {self.usable_cores} usable core(s){kept}, shared by {self.cpu_engines} CPU engine(s)"
        )


def size_threads(
    variables: list[str],
    *,
    launch_env: Mapping[str, str],
    server_env: Mapping[str, str],
    usable_cores: int,
    cpu_engines: int,
) -> ThreadSizing | None:
    """The thread variables to add to a CPU engine's env (None: nothing to set). A variable the
    deployment (``launch_env``) or the server's environment (``server_env``) sets is kept."""
    missing = [name for name in variables if name not in launch_env and name not in server_env]
    if not missing:
        return None
    threads = threads_for(usable_cores=usable_cores, cpu_engines=cpu_engines)
    return ThreadSizing(
        env={name: str(threads) for name in missing},
        threads=threads,
        usable_cores=usable_cores,
        cpu_engines=cpu_engines,
    )
