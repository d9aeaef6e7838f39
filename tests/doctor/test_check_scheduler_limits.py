"""vLLM's scheduler limits as SchedulerConfig checks them (param.batched-tokens-too-small)."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import QWEN3_8B, of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.modeldir import ModelFacts

MODEL = ModelFacts(directory=Path("/models/qwen3-8b"), config=QWEN3_8B)


def _too_small(parameters: str, version: str | None = "0.25.0") -> list[Severity]:
    findings = plan_findings(parameters, version=version, model=MODEL)
    return [f.severity for f in of_id(findings, "param.batched-tokens-too-small")]


def test_fewer_batched_tokens_than_sequences() -> None:
    assert _too_small("--max-num-batched-tokens 448 --max-num-seqs 1024") == [Severity.ERROR]
    assert _too_small("--max-num-batched-tokens 2048 --max-num-seqs 1024") == []


def test_v0_without_chunked_prefill_needs_a_whole_sequence_per_batch() -> None:
    assert _too_small("--max-num-batched-tokens 4096 --max-model-len 8192", version="0.6.3") == [
        Severity.ERROR
    ]
    # The model's own length counts when --max-model-len is not given (40,960 > 32K: V0 chunks).
    assert _too_small("--max-num-batched-tokens 4096", version="0.6.3") == []


def test_chunked_prefill_lifts_the_limit() -> None:
    assert _too_small("--max-num-batched-tokens 4096 --max-model-len 8192") == []  # V1: on by default
    assert (
        _too_small(
            "--max-num-batched-tokens 4096 --max-model-len 8192 --enable-chunked-prefill", version="0.6.3"
        )
        == []
    )
    assert _too_small("--max-num-batched-tokens 4096 --max-model-len 8192 --no-enable-chunked-prefill") == [
        Severity.ERROR
    ]


def test_chunked_prefill_turned_off_with_its_no_form_counts_without_a_version() -> None:
    """vLLM's boolean flags take a --no- form; with no version (no flag table) it still means off."""
    parameters = "--max-num-batched-tokens 8192 --max-model-len 9216 --no-enable-chunked-prefill"
    assert _too_small(parameters, version=None) == [Severity.ERROR]
