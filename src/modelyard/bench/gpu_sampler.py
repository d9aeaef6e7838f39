"""The GPUs during a run, through NVML: utilization, memory and power as a timeline.

A host without an NVIDIA driver (or without nvidia-ml-py) gives an empty timeline with the reason,
never an error. NVML reads the local host only: when the engine runs elsewhere, this shows nothing
about its GPUs (``GpuTimeline.unavailable_reason`` says so when no GPU is seen).

Usage::

    async with GpuSampler(interval_s=1.0) as sampler:
        ...  # run the load
    timeline = sampler.timeline()
    for sample in timeline.samples:
        print(sample.elapsed_s, sample.gpu_index, sample.utilization_percent, sample.power_watts)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

from modelyard.bench.records import TimelineSeries
from modelyard.bench.sampling import PeriodicSampling

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuSample:
    elapsed_s: float
    gpu_index: int
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GpuTimeline:
    gpu_names: dict[int, str] = field(default_factory=dict)
    samples: list[GpuSample] = field(default_factory=list)
    unavailable_reason: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_names)

    def mean_utilization_percent(self) -> float | None:
        values = [s.utilization_percent for s in self.samples if s.utilization_percent is not None]
        return sum(values) / len(values) if values else None

    def peak_memory_used_bytes(self) -> int | None:
        values = [s.memory_used_bytes for s in self.samples if s.memory_used_bytes is not None]
        return max(values) if values else None

    def mean_power_watts(self) -> float | None:
        """Mean over samples of the power summed across GPUs."""
        by_time: dict[float, float] = {}
        for sample in self.samples:
            if sample.power_watts is not None:
                by_time[sample.elapsed_s] = by_time.get(sample.elapsed_s, 0.0) + sample.power_watts
        return sum(by_time.values()) / len(by_time) if by_time else None

    def to_series(self, offset_s: float = 0.0) -> list[TimelineSeries]:
        """Per GPU: utilization (%), memory used (bytes) and power (W) as ``TimelineSeries``."""
        series: dict[str, TimelineSeries] = {}

        def add(name: str, unit: str, sample: GpuSample, value: float | None) -> None:
            if value is None:
                return
            key = f"gpu{sample.gpu_index}_{name}"
            source = f"nvml:gpu{sample.gpu_index}"
            entry = series.setdefault(key, TimelineSeries(name=key, unit=unit, source=source))
            entry.times_s.append(sample.elapsed_s - offset_s)
            entry.values.append(float(value))

        for sample in self.samples:
            add("utilization_percent", "%", sample, sample.utilization_percent)
            add("memory_used_bytes", "bytes", sample, sample.memory_used_bytes)
            add("power_watts", "W", sample, sample.power_watts)
        return list(series.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_names": {str(index): name for index, name in self.gpu_names.items()},
            "unavailable_reason": self.unavailable_reason,
            "samples": [sample.to_json() for sample in self.samples],
            "summary": {
                "mean_utilization_percent": self.mean_utilization_percent(),
                "peak_memory_used_bytes": self.peak_memory_used_bytes(),
                "mean_power_watts": self.mean_power_watts(),
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuTimeline:
        return cls(
            gpu_names={int(index): str(name) for index, name in data.get("gpu_names", {}).items()},
            samples=[GpuSample(**sample) for sample in data.get("samples", [])],
            unavailable_reason=data.get("unavailable_reason"),
        )


class _Nvml:
    """The few NVML calls the sampler makes, on handles opened once for the run."""

    def __init__(self) -> None:
        import pynvml

        self._pynvml = pynvml
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]

    def name(self, index: int) -> str:
        name = self._pynvml.nvmlDeviceGetName(self.handles[index])
        return name.decode() if isinstance(name, bytes) else str(name)

    def read(self, index: int, elapsed_s: float) -> GpuSample:
        pynvml = self._pynvml
        handle = self.handles[index]

        def optional(read: Callable[[Any], Any]) -> Any:
            try:
                return read(handle)
            except pynvml.NVMLError:
                return None

        utilization = optional(pynvml.nvmlDeviceGetUtilizationRates)
        memory = optional(pynvml.nvmlDeviceGetMemoryInfo)
        power_mw = optional(pynvml.nvmlDeviceGetPowerUsage)
        return GpuSample(
            elapsed_s=elapsed_s,
            gpu_index=index,
            utilization_percent=None if utilization is None else float(utilization.gpu),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            power_watts=None if power_mw is None else power_mw / 1000.0,
        )

    def close(self) -> None:
        self._pynvml.nvmlShutdown()


def open_nvml() -> tuple[_Nvml | None, str | None]:
    """NVML opened, or None and the reason it cannot be."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        nvml = _Nvml()
    except pynvml.NVMLError as error:
        return None, f"NVML not available ({error}): no NVIDIA driver on this host"
    if not nvml.handles:
        nvml.close()
        return None, "NVML sees no GPUs"
    return nvml, None


class GpuSampler:
    """Samples every local GPU every ``interval_s`` (``sampling.PeriodicSampling``; NVML calls run
    in a worker thread)."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        gpu_indices: list[int] | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._wanted = gpu_indices
        self._timeline = GpuTimeline()
        self._nvml: _Nvml | None = None
        self._indices: list[int] = []
        self._sampling = PeriodicSampling(
            self._take, interval_s=interval_s, name="gpu-sampler", clock_ns=clock_ns
        )

    async def __aenter__(self) -> GpuSampler:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self._nvml, reason = await asyncio.to_thread(open_nvml)
        if self._nvml is None:
            self._timeline.unavailable_reason = reason
            return
        available = range(len(self._nvml.handles))
        self._indices = [i for i in available if self._wanted is None or i in self._wanted]
        if self._wanted is not None and not self._indices:
            self._timeline.unavailable_reason = (
                f"GPU(s) {self._wanted} asked for, but this host has {len(available)} (indices from 0)"
            )
            return
        self._timeline.gpu_names = {index: self._nvml.name(index) for index in self._indices}
        await self._sampling.start()

    async def stop(self) -> GpuTimeline:
        await self._sampling.stop()
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        return self._timeline

    def timeline(self) -> GpuTimeline:
        return self._timeline

    async def _take(self, elapsed_s: float) -> None:
        await asyncio.to_thread(self._sample_all, elapsed_s)

    def _sample_all(self, elapsed_s: float) -> None:
        nvml = self._nvml
        if nvml is None:
            return
        for index in self._indices:
            self._timeline.samples.append(nvml.read(index, elapsed_s))


class GpuObserver:
    """The runner's ``PointObserver`` for NVML: one sampler per load point, as ``TimelineSeries``
    (none on a host without GPUs)."""

    def __init__(self, *, interval_s: float = 1.0, gpu_indices: list[int] | None = None) -> None:
        self._sampler = GpuSampler(interval_s=interval_s, gpu_indices=gpu_indices)

    async def start(self) -> None:
        await self._sampler.start()

    async def stop(self) -> list[TimelineSeries]:
        timeline = await self._sampler.stop()
        return timeline.to_series()
