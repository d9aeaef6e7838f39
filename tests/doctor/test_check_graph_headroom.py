"""SGLang's CUDA graphs against what --mem-fraction-static leaves outside its pool."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import QWEN3_8B, of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.modeldir import ModelFacts

MODEL = ModelFacts(directory=Path("/models/qwen3-8b"), config=QWEN3_8B)


def _headroom(parameters: str, gpus: str = "1xH100") -> list[Severity]:
    findings = plan_findings(parameters, engine="sglang", version="0.5.10", gpus=gpus, model=MODEL)
    return [f.severity for f in of_id(findings, "memory.fraction-leaves-no-headroom")]


def test_a_fraction_that_leaves_no_room_for_the_graphs_stops_the_start() -> None:
    assert _headroom("--mem-fraction-static 0.99") == [Severity.ERROR]


def test_without_cuda_graphs_the_same_fraction_starts() -> None:
    assert _headroom("--mem-fraction-static 0.99 --disable-cuda-graph") == [Severity.WARNING]


def test_room_for_the_graphs_but_not_a_full_prefill_chunk_is_a_warning() -> None:
    assert _headroom("--mem-fraction-static 0.97") == [Severity.WARNING]


def test_sglangs_default_fraction_leaves_room() -> None:
    assert _headroom("") == []
