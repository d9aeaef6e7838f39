"""The memory sweep (scripts/field/memory_sweep.py): 18 real vLLM 0.25.0 starts on one H200 with
dummy weights of 11 real configs, kept as cases in tests/estimate/sweep/cases.

The split is by architecture, not by run: the configs whose starts were read to change the
estimator on 2026-12-06 (the fitting part: Gemma-3's and Mistral's sliding windows, Qwen3.6-27B's
pages, gate and speculative state) are named below; every other architecture is the evaluation
part, and only its error is reported as accuracy (docs/field-tests/memory-sweep-2026-12-06.md).
The bounds are the issue's target (95 % of starts within 3 % of the logged KV cache), measured on
the evaluation part once; a change that breaks them has made the estimator worse on real starts.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from modelyard.estimate.startup_logs import CaseResult, evaluate, load_cases

CASES = Path(__file__).parent / "sweep" / "cases"
FITTING_CONFIGS = {"gemma-3-1b-it.json", "mistral-7b-v0.1.json", "qwen3.6-27b.json"}


def _family(result: CaseResult) -> str:
    data = yaml.safe_load((CASES / f"{result.case.name}.yaml").read_text(encoding="utf-8"))
    return str(data["family"])


def _split() -> tuple[list[CaseResult], list[CaseResult]]:
    results = evaluate(load_cases(CASES, "evaluation"))
    fitting = [result for result in results if result.case.config_path.name in FITTING_CONFIGS]
    evaluation = [result for result in results if result.case.config_path.name not in FITTING_CONFIGS]
    return fitting, evaluation


def test_every_start_of_the_sweep_is_a_case_with_its_config_and_log() -> None:
    results = evaluate(load_cases(CASES, "evaluation"))
    assert len(results) == 18
    for result in results:
        assert result.case.engine == "vllm" and result.case.engine_version == "0.25.0"
        assert result.case.config_path.is_file(), result.case.name
        assert result.case.logged.tokens > 0 and result.case.logged.memory_bytes > 0


def test_the_evaluation_part_is_other_architectures_than_the_fitting_part() -> None:
    fitting, evaluation = _split()
    assert fitting and evaluation
    assert {r.case.config_path for r in fitting}.isdisjoint({r.case.config_path for r in evaluation})
    assert len({r.case.config_path.name for r in evaluation}) >= 8
    assert {_family(result) for result in evaluation} >= {"dense", "moe", "mla-moe", "vision-language"}


def test_the_evaluation_part_is_within_three_percent_of_the_logged_kv_cache() -> None:
    _, evaluation = _split()
    within = [result for result in evaluation if abs(result.kv_error) <= 0.03]
    assert len(within) >= 0.95 * len(evaluation), [
        (result.case.name, f"{result.kv_error:+.1%}") for result in evaluation if result not in within
    ]
    tokens_within = [result for result in evaluation if abs(result.token_error) <= 0.03]
    assert len(tokens_within) >= 0.95 * len(evaluation)


def test_the_fitting_part_s_sliding_windows_count_tokens_as_vllm_logs_them() -> None:
    fitting, _ = _split()
    sliding = [result for result in fitting if _family(result) == "sliding-window"]
    assert len(sliding) == 2
    assert all(abs(result.token_error) < 0.01 for result in sliding)
