"""The report's gain over each engine's defaults, from measured figures: a ratio with both
throughputs and loads where the defaults met the SLOs, and their best figure, without a ratio,
where they did not (figures given here; the served tests measure them through the double)."""

from __future__ import annotations

import pytest

from modelyard.tune.gains import gains_over_defaults
from modelyard.tune.measurement import Measurement, PointFigures
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import Candidate, EngineChoice
from modelyard.tune.tuner import TuneOutcome

SLOS = parse_slos("ttft_p95<=300ms")
VLLM = EngineChoice("vllm", "vllm", "0.25.0")
SGLANG = EngineChoice("sglang", "sglang", "0.5.17")


def point(load: float, tokens_per_s: float, ttft_p95_ms: float) -> PointFigures:
    return PointFigures(
        load, True, 64, 0, tokens_per_s / 100, tokens_per_s, {"ttft_ms": {"p95": ttft_p95_ms}}
    )


def measured(candidate: Candidate, *points: PointFigures) -> Measurement:
    return Measurement(candidate.candidate_id, 0, 64, points, "/runs", 10.0)


def test_the_winner_is_set_against_each_engines_defaults_with_both_figures() -> None:
    vllm_defaults, sglang_defaults = Candidate(VLLM), Candidate(SGLANG)
    winner = Candidate(VLLM, max_sequences=64, batched_tokens=8192)
    best = point(16, 2400.0, 250.0)
    outcome = TuneOutcome(
        ranking=[winner, vllm_defaults, sglang_defaults],
        measurements={
            winner.candidate_id: [measured(winner, point(8, 1500.0, 120.0), best)],
            vllm_defaults.candidate_id: [
                measured(vllm_defaults, point(8, 1200.0, 200.0), point(16, 2000.0, 400.0))
            ],
            sglang_defaults.candidate_id: [measured(sglang_defaults, point(8, 1300.0, 350.0))],
        },
    )

    gains = gains_over_defaults([vllm_defaults, sglang_defaults, winner], outcome, SLOS, winner, best)

    vllm, sglang = gains
    assert vllm["defaults"] == "vllm 0.25.0 tp1 defaults"
    assert vllm["ratio"] == pytest.approx(2.0)  # 2,400 at load 16 against 1,200 at load 8 (16 missed the SLO)
    assert vllm["text"] == "2.00x (2,400.0 at load 16 against 1,200.0 at load 8, both within the SLOs)"
    assert sglang["ratio"] is None and not sglang["defaults_meets_slos"]
    assert sglang["text"] == (
        "the defaults met the SLOs at no load (their best: 1,300.0 at load 8; winner 2,400.0 at load 16)"
    )
