"""The correction from this installation's starts: which starts count (key levels, age, window),
when it is applied (never from one start; outliers left out), and what it does to an estimate."""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from modelyard.estimate import estimate_memory, parse_gpu_specs
from modelyard.estimate.correction import (
    UNCORRECTED_HEADROOM_BYTES,
    StartKey,
    StartObservation,
    apply_correction,
    booking_headroom_bytes,
    correction_for,
    gpu_model_key,
    start_key,
)
from modelyard.estimate.startup_logs import evaluate, load_cases
from modelyard.modeldir import read_model_facts
from modelyard.testing.stand_ins import build_stand_in

GIB = 1 << 30
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
KEY = StartKey(
    engine="vllm",
    engine_version="0.25.0",
    gpu_model="H100",
    architecture="Qwen3ForCausalLM",
    memory_fraction=0.5,
    context_tokens=8192,
    enforce_eager=False,
    kv_dtype="bfloat16",
    tensor_parallel=1,
)
PREDICTED_BYTES = 20 * GIB
PREDICTED_TOKENS = 145_000


def start(
    relative_offset: float, *, key: StartKey = KEY, age_hours: float = 1.0, shown_tokens: int | None = None
) -> StartObservation:
    """A start whose engine logged ``relative_offset`` more KV than predicted (-0.07: 7 % less)."""
    logged_tokens = int(PREDICTED_TOKENS * (1 + relative_offset))
    return StartObservation(
        key=key,
        observed_at=NOW - timedelta(hours=age_hours),
        predicted_kv_bytes=PREDICTED_BYTES,
        predicted_kv_tokens=PREDICTED_TOKENS,
        shown_kv_tokens=shown_tokens or PREDICTED_TOKENS,
        logged_kv_bytes=int(PREDICTED_BYTES * (1 + relative_offset)),
        logged_kv_tokens=logged_tokens,
    )


def test_one_start_is_shown_but_never_applied() -> None:
    correction = correction_for(KEY, [start(-0.07)], now=NOW)
    assert correction is not None and not correction.applied
    assert correction.describe() == (
        "not corrected: one start (these settings) is not enough, a second must agree (last error +7.5 %)"
    )


def test_two_agreeing_starts_apply_their_median_offset() -> None:
    correction = correction_for(KEY, [start(-0.07, age_hours=2), start(-0.06)], now=NOW)
    assert correction is not None and correction.applied
    assert correction.starts == 2 and correction.outliers == 0
    assert correction.relative_offset == pytest.approx(-0.065, abs=1e-6)
    assert correction.describe().startswith("corrected by 2 starts on this cluster (these settings)")


def test_two_disagreeing_starts_are_not_applied_and_say_so() -> None:
    correction = correction_for(KEY, [start(-0.07, age_hours=2), start(0.01)], now=NOW)
    assert correction is not None and not correction.applied
    assert correction.note is not None and "disagree (-7.0 %, +1.0 %)" in correction.note


def test_an_outlier_among_several_starts_is_left_out() -> None:
    starts = [start(value, age_hours=10 - index) for index, value in enumerate([-0.07, -0.068, -0.3, -0.071])]
    correction = correction_for(KEY, starts, now=NOW)
    assert correction is not None and correction.applied
    assert correction.starts == 3 and correction.outliers == 1
    assert correction.relative_offset == pytest.approx(-0.07, abs=1e-6)
    assert "1 outlier(s) left out" in correction.describe()


def test_a_coarser_key_stands_in_when_these_settings_never_started() -> None:
    other_knob = replace(KEY, memory_fraction=0.6, context_tokens=32768)
    starts = [start(-0.05, key=other_knob, age_hours=2), start(-0.05, key=other_knob)]
    correction = correction_for(KEY, starts, now=NOW)
    assert correction is not None and correction.level == "this model at another knob or context"
    # The finer level wins as soon as it has a start, even one the rule does not apply yet.
    finer = correction_for(KEY, [*starts, start(-0.07)], now=NOW)
    assert finer is not None and finer.level == "these settings" and not finer.applied


def test_other_models_fall_back_to_the_engine_and_gpu_but_never_across_versions_or_gpus() -> None:
    other_model = replace(KEY, architecture="LlamaForCausalLM", kv_dtype="fp8")
    starts = [start(-0.04, key=other_model, age_hours=2), start(-0.04, key=other_model)]
    correction = correction_for(KEY, starts, now=NOW)
    assert correction is not None and correction.level == "other models on this engine and GPU"
    for far in (replace(KEY, engine_version="0.19.0"), replace(KEY, gpu_model="A100")):
        assert correction_for(KEY, [start(-0.04, key=far), start(-0.04, key=far)], now=NOW) is None


def test_old_starts_expire_and_only_the_last_eight_count() -> None:
    assert correction_for(KEY, [start(-0.07, age_hours=31 * 24)] * 3, now=NOW) is None
    old = [start(-0.2, age_hours=100 + index) for index in range(8)]
    new = [start(-0.05, age_hours=10 - index) for index in range(8)]
    correction = correction_for(KEY, [*old, *new], now=NOW)
    assert correction is not None and correction.relative_offset == pytest.approx(-0.05, abs=1e-6)


def test_a_placement_without_its_knob_skips_the_level_that_needs_it() -> None:
    starts = [start(-0.07, age_hours=2), start(-0.07)]
    correction = correction_for(replace(KEY, memory_fraction=None), starts, now=NOW)
    assert correction is not None and correction.level == "this model at another knob or context"


def test_the_booking_headroom_covers_the_offset_and_the_spread() -> None:
    correction = correction_for(KEY, [start(-0.07, age_hours=2), start(-0.06)], now=NOW)
    assert correction is not None
    # 6.5 % of 20 GiB missing, plus how far the starts lie from it: the worse start's 7 % is covered.
    assert booking_headroom_bytes("vllm", correction) == pytest.approx(0.07 * PREDICTED_BYTES, rel=0.001)
    assert booking_headroom_bytes("vllm", None) == UNCORRECTED_HEADROOM_BYTES["vllm"]


def test_the_uncorrected_headroom_is_the_evaluation_splits_median_error() -> None:
    results = evaluate(load_cases(Path(__file__).parent / "evaluation", split="evaluation"))
    for engine, headroom in UNCORRECTED_HEADROOM_BYTES.items():
        errors = [abs(result.kv_error_bytes) for result in results if result.case.engine == engine]
        assert headroom == pytest.approx(statistics.median(errors), abs=0.01 * GIB), engine


@pytest.mark.parametrize(
    ("name", "key"),
    [("NVIDIA H100 80GB HBM3", "H100"), ("H100", "H100"), ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"),
     ("NVIDIA H100 NVL", "H100 NVL"), ("GPU 48GB", "GPU 48GB")],
)  # fmt: skip
def test_gpu_models_are_grouped_by_board(name: str, key: str) -> None:
    assert gpu_model_key(name) == key


def test_an_applied_correction_lowers_the_estimates_kv_and_says_by_how_many_starts(tmp_path: Path) -> None:
    facts = read_model_facts(build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B"))
    parameters = ["--gpu-memory-utilization 0.5", "--max-model-len 8192"]
    estimate = estimate_memory(facts, "vllm", parse_gpu_specs("1xH100"), parameters, engine_version="0.25.0")
    key = start_key(estimate, engine_version="0.25.0", architecture=facts.architecture, parameters=parameters)
    assert key.gpu_model == "H100" and key.memory_fraction == 0.5 and key.context_tokens == 8192
    logged = int(estimate.plan_on_total.kv_cache_tokens * 0.93)
    observations = [
        StartObservation(
            key=key,
            observed_at=NOW - timedelta(hours=hours),
            predicted_kv_bytes=estimate.plan_on_total.kv_cache_bytes,
            predicted_kv_tokens=estimate.plan_on_total.kv_cache_tokens,
            shown_kv_tokens=estimate.plan_on_total.kv_cache_tokens,
            logged_kv_bytes=int(estimate.plan_on_total.kv_cache_bytes * 0.93),
            logged_kv_tokens=logged,
        )
        for hours in (2, 1)
    ]
    correction = correction_for(key, observations, now=NOW)
    assert correction is not None and correction.applied
    corrected = apply_correction(estimate, correction)
    assert corrected.plan_on_total.kv_cache_tokens == pytest.approx(logged, rel=0.001)
    assert corrected.to_json()["correction"]["text"] == (
        "corrected by 2 starts on this cluster (these settings), last error +7.5 %"
    )
    assert estimate.recommended_memory_fraction is not None
    assert corrected.recommended_memory_fraction is not None
    assert corrected.recommended_memory_fraction >= estimate.recommended_memory_fraction
