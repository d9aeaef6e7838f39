"""The memory knob is set against the total the engine divides, not NVML's.

The scheduler books against NVML's figures (143,771 MiB on an H200, 81,559 MiB on an H100); vLLM's
``--gpu-memory-utilization`` is a share of CUDA's total (vLLM v1 ``worker/utils.py:
request_memory``: ``ceil(total_memory x utilization)``, ``total_memory`` from
``torch.cuda.mem_get_info``), and SGLang's ``--mem-fraction-static`` of the free memory CUDA
reports when it starts (``get_available_gpu_memory``). The figures the engines logged on those
boards are the test's engine side: a replica booked for N tokens must get at least N.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from modelyard.control.memory_demand import MemoryDemand, memory_demand
from modelyard.estimate import GpuSpec
from modelyard.estimate.gpus import (
    cuda_visible_total_bytes,
    driver_reserved_bytes,
    engine_view,
    gpu_specs_from_inventory,
)
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.testing.stand_ins import build_stand_in

GIB = 1 << 30
MIB = 1 << 20
# NVML's totals, and the totals the engines logged on the same boards (vLLM's "worker init memory
# snapshot ... total_memory=139.8GiB", docs/field-tests/memory-sweep-2026-12-06; the H100's
# "total_memory=79.19GiB", tests/estimate/evaluation/llmd-vllm0190-qwen-qwen3-8b-h100-8192.yaml).
H200_NVML_BYTES = 143_771 * MIB
H200_LOGGED_TOTAL_GIB = 139.8
H100_NVML_BYTES = 81_559 * MIB
H100_LOGGED_TOTAL_GIB = 79.19
# SGLang 0.5.17 on that H200: "Load weight begin. avail mem=139.13 GB" (139.11 at its lowest),
# docs/field-tests/memory-sweep-sglang-2026-12-07: the free memory its knob is a share of.
H200_SGLANG_LOGGED_FREE_GIB = 139.11
# The logs give two decimals: the engine's figure is anywhere within half a hundredth of them.
LOG_ROUNDING_GIB = 0.005


@pytest.fixture(scope="module")
def qwen3_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stand_in("qwen3-8b", tmp_path_factory.mktemp("stand-in") / "Qwen3-8B")


def vllm_demand(model: Path, nvml_total_bytes: int, sequences: int) -> MemoryDemand:
    return memory_demand(
        engine="vllm",
        engine_version="0.25.0",
        model_path=str(model),
        parameters=["--max-model-len", "8192", "--max-num-seqs", str(sequences)],
        env={},
        gpu_memory="auto",
        gpu_count=1,
        gpu=GpuSpec(name="NVIDIA GPU", memory_total_bytes=nvml_total_bytes),
    )


def vllm_budget_bytes(logged_total_gib: float, fraction: float) -> int:
    """What vLLM takes at this knob on a GPU whose CUDA total it logged (the lowest the log's
    rounding allows): ``request_memory``'s ``ceil(total_memory x utilization)``."""
    return math.ceil((logged_total_gib - LOG_ROUNDING_GIB) * GIB * fraction)


@pytest.mark.parametrize(
    ("nvml_total_bytes", "logged_total_gib", "sequences"),
    [(H200_NVML_BYTES, H200_LOGGED_TOTAL_GIB, 64), (H100_NVML_BYTES, H100_LOGGED_TOTAL_GIB, 32)],
    ids=["H200", "H100"],
)
def test_vllm_gets_the_budget_it_was_booked_for_on_a_whole_gpu(
    qwen3_8b: Path, nvml_total_bytes: int, logged_total_gib: float, sequences: int
) -> None:
    # 64 (32) sequences of 8,192 tokens: a booking of most of the GPU, where a knob taken of
    # NVML's total gives vLLM 0.3-0.4 GiB (2,000-2,700 tokens of Qwen3-8B) less than booked.
    demand = vllm_demand(qwen3_8b, nvml_total_bytes, sequences)
    assert demand.bytes_per_gpu < nvml_total_bytes
    fraction = demand.fraction_for(nvml_total_bytes, nvml_total_bytes)
    booked_budget = demand.bytes_per_gpu - demand.outside_budget_bytes
    got = vllm_budget_bytes(logged_total_gib, fraction)
    kv_bytes_per_token = demand.kv_cache_bytes // demand.kv_tokens_booked
    short_tokens = max(0, booked_budget - got) // kv_bytes_per_token
    assert got >= booked_budget, (
        f"knob {fraction} gives vLLM {got / GIB:.2f} GiB of the {booked_budget / GIB:.2f} GiB booked: "
        f"{short_tokens:,} of the {demand.kv_tokens_booked:,} KV tokens booked missing"
    )


def test_sglang_gets_the_budget_it_was_booked_for_on_an_idle_h200(qwen3_8b: Path) -> None:
    demand = memory_demand(
        engine="sglang",
        engine_version="0.5.17",
        model_path=str(qwen3_8b),
        parameters=["--context-length", "8192", "--max-running-requests", "64"],
        env={},
        gpu_memory="auto",
        gpu_count=1,
        gpu=GpuSpec(name="NVIDIA H200", memory_total_bytes=H200_NVML_BYTES),
    )
    # Free on the idle board as the scheduler hands it over: CUDA's view (engine_view).
    fraction = demand.fraction_for(H200_NVML_BYTES, cuda_visible_total_bytes(H200_NVML_BYTES))
    booked_budget = demand.bytes_per_gpu - demand.outside_budget_bytes
    # SGLang's static pool (weights and KV): its knob x the free memory it measured.
    got = int((H200_SGLANG_LOGGED_FREE_GIB - LOG_ROUNDING_GIB) * GIB * fraction)
    assert got >= booked_budget, f"knob {fraction}: {got / GIB:.2f} GiB of {booked_budget / GIB:.2f} GiB"


@pytest.mark.parametrize(
    ("nvml_total_bytes", "logged_total_gib"),
    [(H200_NVML_BYTES, H200_LOGGED_TOTAL_GIB), (H100_NVML_BYTES, H100_LOGGED_TOTAL_GIB)],
    ids=["H200", "H100"],
)
def test_a_measured_board_is_seen_as_its_engine_logged_it(
    nvml_total_bytes: int, logged_total_gib: float
) -> None:
    seen = cuda_visible_total_bytes(nvml_total_bytes)
    assert abs(seen - logged_total_gib * GIB) <= LOG_ROUNDING_GIB * GIB + MIB
    assert seen <= logged_total_gib * GIB


def test_a_board_not_measured_loses_at_least_the_largest_reservation_measured() -> None:
    # An RTX 4090's 24,564 MiB: no measured pair, so the larger of the H200's 621 MiB and the
    # H100's 0.58 % comes off.
    nvml = 24_564 * MIB
    assert nvml - cuda_visible_total_bytes(nvml) >= 620 * MIB
    view = engine_view("NVIDIA GeForce RTX 4090", nvml, nvml - GIB)
    assert view.memory_total_bytes == cuda_visible_total_bytes(nvml)
    assert view.memory_free_bytes == view.memory_total_bytes - GIB


def test_the_estimate_command_and_preflight_see_the_gpu_as_the_knob_does() -> None:
    """``modelyard estimate`` on this host, the doctor's preflight and the start check read NVML's
    inventory; each now takes CUDA's view of it (``engine_view``), the one total the knob divides:
    an H200 is 139.8 GiB there, not NVML's 140.4."""
    free = H200_NVML_BYTES - 2 * GIB
    inventory = GpuInventory(
        gpus=[GpuInfo(0, "GPU-0", "NVIDIA H200", H200_NVML_BYTES, free, H200_NVML_BYTES - free)]
    )
    [seen] = gpu_specs_from_inventory(inventory)
    assert seen.memory_total_bytes == cuda_visible_total_bytes(H200_NVML_BYTES)
    assert abs(seen.memory_total_bytes - H200_LOGGED_TOTAL_GIB * GIB) <= LOG_ROUNDING_GIB * GIB + MIB
    assert seen.memory_free_bytes == free - driver_reserved_bytes(H200_NVML_BYTES)
