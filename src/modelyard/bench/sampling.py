"""Taking a sample every ``interval_s`` while a load runs: the one loop under the bench's samplers
(``gpu_sampler.GpuSampler`` for NVML, ``server_poller.ServerMetricsPoller`` for ``/metrics``).

A sample is taken at ``start()`` (the baseline of every delta), then every ``interval_s``, and a
last one at ``stop()`` (the end of the window), so a window shorter than one interval still has
both ends. ``take`` gets the seconds since ``start()`` on ``clock_ns``; it must not raise (a
sampler counts and reports its own failures: what it observes is an addition to the run, not a
condition of it).

Usage::

    async def take(elapsed_s: float) -> None:
        samples.append((elapsed_s, read_something()))

    sampling = PeriodicSampling(take, interval_s=1.0, name="my-sampler")
    await sampling.start()
    ...  # run the load
    await sampling.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class PeriodicSampling:
    """Runs ``take`` on a task of its own: at start, every ``interval_s``, and once more at stop."""

    def __init__(
        self,
        take: Callable[[float], Awaitable[None]],
        *,
        interval_s: float,
        name: str,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._take = take
        self._interval_s = interval_s
        self._name = name
        self._clock_ns = clock_ns
        self._start_ns = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def elapsed_s(self) -> float:
        """Seconds since ``start()``."""
        return (self._clock_ns() - self._start_ns) / 1e9

    async def start(self) -> None:
        self._start_ns = self._clock_ns()
        self._stop.clear()
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Take the last sample and end the task (nothing when never started)."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._take(self.elapsed_s())
            if self._stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._stop.wait()
