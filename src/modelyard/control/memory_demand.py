"""What a deployment placed by memory needs per GPU, and the engine's memory knob that gives it.

A deployment asks for memory placement with ``placement.gpu_memory``: ``"auto"`` (from the
estimator) or a size in bytes. ``auto`` is the estimator's sum for one replica's GPU: weights,
peak activations, memory outside torch, the CUDA context and graphs, and a KV cache for
``--max-num-seqs`` (vLLM) / ``--max-running-requests`` (SGLang) sequences of the deployment's
context length, or one sequence when neither is given. The scheduler books that many bytes on
each GPU; once the GPU is chosen the knob is set so that the engine takes exactly that:

- vLLM ``--gpu-memory-utilization`` is a fraction of the GPU's TOTAL memory for everything but
  the CUDA context (and graphs, unless they are counted in the budget);
- SGLang ``--mem-fraction-static`` is a fraction of the memory FREE when it starts, for weights
  and the KV pool only: it depends on what the GPU's other engines already hold.

Both totals are CUDA's (``torch.cuda.mem_get_info``), smaller than NVML's, which the scheduler
books against, by the driver's reservation (0.6 GiB on an H200): the knob is set against CUDA's,
the booking stays in NVML's bytes (``estimate/gpus.py: cuda_visible_total_bytes``).

The booking carries headroom for the estimate's measured error, so that the engine gets at least
the KV cache it was booked for: the correction from this installation's recorded starts where
there is one (the KV bytes the engine lacked, plus their spread), else the estimator's median
error on its evaluation split (``estimate/correction.py``, ``booking_headroom_bytes``).

``auto`` also books the placement headroom (``serve --placement-headroom``,
``MODELYARD_PLACEMENT_HEADROOM_GIB``, 0.5 GiB by default) outside the knob: the engine does not
take it, so what the estimate misses outside the engine's budget (CUDA graphs larger than counted)
lands there rather than on a neighbour's share. After the start, ``control/booking_check.py``
compares what the engine logged it took with the booking.

A deployment whose parameters set the knob themselves keeps it, and books what it implies.
Without ``gpu_memory`` a deployment books whole GPUs, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from modelyard.backends.parameters import ParsedParameters
from modelyard.errors import InvalidInput
from modelyard.estimate import GpuSpec, estimate_memory, parse_engine_arguments
from modelyard.estimate.correction import StartObservation, booking_headroom_bytes, correction_for, start_key
from modelyard.estimate.gpus import driver_reserved_bytes
from modelyard.estimate.overheads import (
    CUDA_CONTEXT_BYTES,
    NON_TORCH_PARALLEL_EXTRA_BYTES,
    SGLANG_HELD_AT_MEASURE_BYTES,
    SGLANG_MULTIMODAL_PRELOAD_BYTES,
)
from modelyard.modeldir import read_model_facts

GIB = 1 << 30
KNOB_FLAGS = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}
# Knob values are written with this many decimals (0.001 of an H200 is 0.14 GiB).
KNOB_DECIMALS = 3


@dataclass(frozen=True)
class MemoryDemand:
    """Bytes per GPU for one replica, and how they split (shown in the instance's placement)."""

    engine: str
    bytes_per_gpu: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_sequences: int
    context_tokens: int
    # Outside the knob's budget: the CUDA context (+ graphs for vLLM; + activations for SGLang),
    # and the placement headroom (``reserve_bytes``).
    outside_budget_bytes: int
    # The user set the knob: its value, kept.
    fixed_fraction: float | None = None
    # Added to the estimate so that the engine gets at least the booked KV: the correction's
    # offset and spread from this installation's starts, else the estimator's known error.
    headroom_bytes: int = 0
    # "corrected by 3 starts on this cluster ...", or how the headroom was chosen.
    headroom_source: str = ""
    # The placement headroom booked outside the knob (``serve --placement-headroom``).
    reserve_bytes: int = 0
    # SGLang: what it holds when it measures the free memory its knob is a share of, beyond the
    # CUDA context (a multimodal front end, parallel buffers), as the estimator models them.
    held_at_measure_bytes: int = 0

    @property
    def kv_tokens_booked(self) -> int:
        return self.kv_sequences * self.context_tokens

    @property
    def knob(self) -> str:
        return KNOB_FLAGS[self.engine]

    def summary(self) -> str:
        return (
            f"{self.bytes_per_gpu / GIB:.1f} GiB per GPU: weights {self.weights_bytes / GIB:.1f} GiB, "
            f"KV cache {self.kv_cache_bytes / GIB:.2f} GiB ({self.kv_sequences} x {self.context_tokens:,} "
            f"tokens), the rest activations, CUDA context and graphs"
            + (
                f"; headroom {self.headroom_bytes / GIB:.2f} GiB ({self.headroom_source})"
                if self.headroom_bytes
                else ""
            )
            + (
                f"; placement headroom {self.reserve_bytes / GIB:.2f} GiB outside the knob"
                if self.reserve_bytes
                else ""
            )
        )

    def fraction_for(self, nvml_total_bytes: int, free_before_start_bytes: int) -> float:
        """The knob's value on the chosen GPU (``nvml_total_bytes``: its NVML total, as workers
        report it; ``free_before_start_bytes``: free as the engine will see it once the GPU's other
        engines hold their shares, which SGLang's fraction is taken of: the scheduler's free bytes,
        already in CUDA's view, ``estimate.gpus.engine_view``). Each engine takes its share of what
        CUDA sees, the NVML figures less the driver's reservation
        (``estimate.gpus.cuda_visible_total_bytes``), so the knob is set against that: a share of
        NVML's larger total would give the engine less than its budget (0.92 x 0.6 GiB less KV
        cache on an H200)."""
        if self.fixed_fraction is not None:
            return self.fixed_fraction
        budget = self.bytes_per_gpu - self.outside_budget_bytes
        reserved = driver_reserved_bytes(nvml_total_bytes)
        if self.engine == "vllm":
            base = nvml_total_bytes - reserved
        else:
            held = SGLANG_HELD_AT_MEASURE_BYTES + self.held_at_measure_bytes
            base = max(1, free_before_start_bytes - held)
        scale = 10**KNOB_DECIMALS
        fraction: float = math.ceil(budget / base * scale) / scale
        return min(0.99, fraction)


def parse_gpu_memory(value: object) -> int | str | None:
    """``placement.gpu_memory`` as stored: None, ``"auto"``, or bytes (``"20GiB"``/``"20GB"`` read)."""
    if value is None or value == "":
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        for unit in ("gib", "gb", "g"):
            if text.endswith(unit):
                try:
                    amount = float(text[: -len(unit)])
                except ValueError:
                    break
                if amount > 0:
                    return int(amount * GIB)
    raise InvalidInput(
        f"gpu memory {value!r} is not 'auto' or a size such as 20GiB",
        hint="--gpu-memory auto (from the estimate) or --gpu-memory 20GiB (per GPU)",
    )


def memory_demand(
    *,
    engine: str,
    engine_version: str,
    model_path: str,
    parameters: Sequence[str] | ParsedParameters,
    env: dict[str, str],
    gpu_memory: int | str,
    gpu_count: int,
    gpu: GpuSpec,
    observations: Sequence[StartObservation] = (),
    now: datetime | None = None,
    reserve_bytes: int = 0,
) -> MemoryDemand:
    """The demand of one replica GPU of ``gpu``'s kind. ``InvalidInput`` for an engine the
    estimator does not model (memory placement is for vLLM and SGLang). ``observations``: this
    installation's starts of the engine version; their correction sets the booking's headroom.
    ``reserve_bytes``: the placement headroom, booked outside the knob with ``auto``."""
    if engine not in KNOB_FLAGS:
        raise InvalidInput(
            f"placement by memory needs an engine with a memory knob (vLLM, SGLang), not {engine!r}",
            hint="leave --gpu-memory out: the deployment then books whole GPUs",
        )
    facts = read_model_facts(Path(model_path))
    estimate = estimate_memory(
        facts, engine, [gpu] * max(1, gpu_count), parameters, engine_version=engine_version, env=env
    )
    arguments = parse_engine_arguments(engine, parameters, engine_version)
    outside = CUDA_CONTEXT_BYTES
    if engine == "vllm" and not estimate.cuda_graphs_in_budget:
        outside += estimate.cuda_graph_bytes
    held = 0
    if engine == "sglang":
        outside += estimate.cuda_graph_bytes + estimate.activation_bytes
        held = (NON_TORCH_PARALLEL_EXTRA_BYTES if gpu_count > 1 else 0) + (
            SGLANG_MULTIMODAL_PRELOAD_BYTES if estimate.encoder_loaded else 0
        )
        # What it holds when it measures is outside its knob too (its context as measured).
        outside += SGLANG_HELD_AT_MEASURE_BYTES - CUDA_CONTEXT_BYTES + held
    sequences = max(1, arguments.max_sequences or 1)
    context = estimate.context_tokens
    kv = estimate.cache_bytes_for(sequences)
    if engine == "vllm":
        inside = estimate.weights_bytes + estimate.activation_bytes + estimate.non_torch_bytes + kv
        if estimate.cuda_graphs_in_budget:
            inside += estimate.cuda_graph_bytes
        inside += 16 * estimate.cache.kv_bytes_per_token  # one block of slack
    else:
        inside = estimate.weights_bytes + kv
    key = start_key(
        estimate,
        engine_version=engine_version,
        architecture=facts.architecture,
        parameters=parameters,
        knob_known=False,
    )
    correction = correction_for(key, observations, now=now or datetime.now(UTC)) if observations else None
    headroom = booking_headroom_bytes(engine, correction)
    if correction is not None and correction.applied:
        source = correction.describe()
    else:
        source = "the estimator's median error on its evaluation split" + (
            f"; {correction.describe()}" if correction is not None else ""
        )
    fixed = None if estimate.memory_fraction_is_default else estimate.memory_fraction
    if fixed is None and not isinstance(gpu_memory, int):
        inside += headroom
    else:
        headroom, source = 0, ""
    if fixed is not None:
        inside = int(fixed * gpu.memory_total_bytes)
    elif isinstance(gpu_memory, int):
        if gpu_memory <= outside:
            raise InvalidInput(
                f"--gpu-memory {gpu_memory / GIB:.1f} GiB leaves nothing for the engine beyond its "
                f"CUDA context and graphs ({outside / GIB:.1f} GiB)",
                hint="ask for more, or --gpu-memory auto",
            )
        inside = gpu_memory - outside
    reserve = reserve_bytes if gpu_memory == "auto" else 0
    outside += reserve
    return MemoryDemand(
        engine=engine,
        bytes_per_gpu=inside + outside,
        weights_bytes=estimate.weights_bytes,
        kv_cache_bytes=kv,
        kv_sequences=sequences,
        context_tokens=context,
        outside_budget_bytes=outside,
        fixed_fraction=fixed,
        headroom_bytes=headroom,
        headroom_source=source,
        reserve_bytes=reserve,
        held_at_measure_bytes=held,
    )
