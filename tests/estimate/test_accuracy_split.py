"""The estimator's fitting and evaluation logs are split by source, and the evaluation error is
reported (scripts/estimate_accuracy.py prints it; docs/estimate.md quotes it).

The evaluation bounds below are regression guards set once from the first evaluation run, not
targets to tune against: a change that moves the median past them has made the estimator worse on
starts it never saw.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from modelyard.estimate.startup_logs import evaluate, load_cases, source_key, summarize

ROOT = Path(__file__).parent
FITTING = load_cases(ROOT / "fixtures", "fitting")
EVALUATION = load_cases(ROOT / "evaluation", "evaluation")


def test_no_source_is_in_both_splits() -> None:
    fitting = {case.source for case in FITTING}
    evaluation = {case.source for case in EVALUATION}
    assert fitting and evaluation
    assert fitting.isdisjoint(evaluation), fitting & evaluation


def test_the_evaluation_split_covers_both_engines_from_several_sources() -> None:
    assert len(EVALUATION) >= 30
    assert {case.engine for case in EVALUATION} == {"vllm", "sglang"}
    assert len({case.source for case in EVALUATION}) >= 4
    for case in EVALUATION:
        assert case.source_url.startswith("https://"), case.name
        assert case.predict_available_memory, case.name


def test_source_keys() -> None:
    assert source_key("https://github.com/vllm-project/vllm/issues/10517") == "vllm-project/vllm"
    assert source_key("https://docs.sglang.ai/start/send_request.html") == "docs.sglang.ai"
    assert source_key("field run: one NVIDIA H200, 2026-11-30") == "modelyard field runs"


def test_evaluation_error_stays_near_the_first_run() -> None:
    summaries = {summary.engine: summary for summary in summarize(evaluate(EVALUATION))}
    assert summaries["vllm"].median_abs_kv_error < 0.03
    assert summaries["sglang"].median_abs_kv_error < 0.03
    assert summaries["vllm"].worst_abs_kv_gib < 4
    assert summaries["sglang"].worst_abs_kv_gib < 1


def test_the_script_prints_the_evaluation_table() -> None:
    script = ROOT.parent.parent / "scripts" / "estimate_accuracy.py"
    output = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert "evaluation split" in output and "median" in output
    assert "vllm" in output and "sglang" in output
