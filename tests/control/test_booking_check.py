"""What an engine took on its GPU, read from its start log, against nvidia-smi on real starts (the
memory sweeps' cases, tests/estimate/sweep/cases), and the placement headroom's setting."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml

from modelyard.control.booking_check import NVML_BASELINE_BYTES, UNLOGGED_BYTES, engine_used_bytes
from modelyard.errors import InvalidInput
from modelyard.estimate.startup_logs import parse_log
from modelyard.settings import ENV_PLACEMENT_HEADROOM, parse_placement_headroom

GIB = 1 << 30
CASES = Path(__file__).resolve().parents[1] / "estimate" / "sweep" / "cases"
MIB = 1 << 20


def sweep_starts(engine: str) -> list[tuple[int, int]]:
    """(the log's used bytes, nvidia-smi's used bytes at ready) of each sweep start of ``engine``."""
    starts = []
    for path in sorted(CASES.glob("*.yaml")):
        case = yaml.safe_load(path.read_text(encoding="utf-8"))
        if case["engine"] != engine or not case.get("gpu_used_at_ready_mib"):
            continue
        logged = parse_log(engine, case["log"])
        assert logged.used_bytes is not None, case["name"]
        starts.append((logged.used_bytes, int(case["gpu_used_at_ready_mib"]) * MIB))
    return starts


def test_vllm_use_is_its_logged_breakdown_and_kv_cache() -> None:
    case = yaml.safe_load((CASES / "qwen3-8b-8k-start1.yaml").read_text(encoding="utf-8"))
    logged = parse_log("vllm", case["log"])
    # "Actual usage is 15.27 GiB for weight, 1.29 GiB for peak activation, 0.22 GiB for non-torch
    # memory, and 1.0 GiB for CUDAGraph memory", and 111.84 GiB of KV cache.
    assert logged.used_bytes == pytest.approx((15.27 + 1.29 + 0.22 + 1.0 + 111.84) * GIB, abs=MIB)


def test_sglang_use_runs_from_its_first_avail_mem_line_to_its_last() -> None:
    log = (
        "[2026-12-07 05:40:46] Load weight begin. avail mem=139.13 GB\n"
        "[2026-12-07 05:40:46] KV Cache is allocated. #tokens: 597760, K size: 41.04 GB, V size: 41.04 GB\n"
        "[2026-12-07 05:40:46] Memory pool end. avail mem=41.58 GB\n"
        "[2026-12-07 05:40:50] Capture cuda graph end. Time elapsed: 3.1 s. avail mem=40.87 GB\n"
    )
    logged = parse_log("sglang", log)
    assert logged.used_bytes is not None
    assert logged.used_bytes == pytest.approx((139.13 - 40.87) * GIB, abs=MIB)
    assert engine_used_bytes("sglang", logged) == logged.used_bytes + UNLOGGED_BYTES["sglang"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_what_the_log_does_not_count_is_what_nvidia_smi_measured_on_the_sweeps(engine: str) -> None:
    starts = sweep_starts(engine)
    assert len(starts) == 18
    unlogged = statistics.median(smi - NVML_BASELINE_BYTES - logged for logged, smi in starts)
    assert unlogged == pytest.approx(UNLOGGED_BYTES[engine], abs=0.1 * GIB)


def test_a_placement_headroom_out_of_range_names_its_setting() -> None:
    assert parse_placement_headroom(0.5) == GIB // 2
    with pytest.raises(InvalidInput) as refused:
        parse_placement_headroom(-1.0)
    assert ENV_PLACEMENT_HEADROOM in (refused.value.hint or "")
    assert "--placement-headroom" in (refused.value.hint or "")
