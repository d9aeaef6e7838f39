"""What the tune gained: the winner against the defaults of every engine and layout measured
(each backend version's candidate with every knob left to the engine), as a ratio of the
throughputs within the SLOs, with both measured figures, so the report says "1.8x vLLM's defaults,
2.4x SGLang's" and shows the numbers behind it.

Each side's figure is its best load point within every SLO in its deepest measurement; a defaults
candidate that met the SLOs at no load has no ratio, and its highest valid throughput is shown
instead (``defaults_meets_slos`` false).

    gains = gains_over_defaults(candidates, outcome, slos, winner_candidate, winner_point)
    for gain in gains:
        print(gain["defaults"], gain["ratio"])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelyard.tune.measurement import Measurement, PointFigures
from modelyard.tune.slo import Slo
from modelyard.tune.space import Candidate
from modelyard.tune.tuner import TuneOutcome


def _best_valid(measurement: Measurement) -> PointFigures | None:
    valid = [point for point in measurement.points if point.valid and point.requests_succeeded]
    return max(valid, key=lambda point: point.throughput) if valid else None


def gains_over_defaults(
    candidates: Sequence[Candidate],
    outcome: TuneOutcome,
    slos: list[Slo],
    winner: Candidate,
    winner_point: PointFigures,
) -> list[dict[str, Any]]:
    """One entry per measured defaults candidate (``Candidate.is_defaults``), in the order tried."""
    gains: list[dict[str, Any]] = []
    winner_measurement = outcome.latest(winner.candidate_id)
    for candidate in candidates:
        if not candidate.is_defaults:
            continue
        measurement = outcome.latest(candidate.candidate_id)
        if measurement is None:
            continue
        within = measurement.best_point(slos)
        shown = within or _best_valid(measurement)
        gains.append(
            {
                "defaults_candidate_id": candidate.candidate_id,
                "defaults": candidate.label,
                "engine": candidate.engine.backend,
                "engine_version": candidate.engine.version,
                "is_winner": candidate == winner,
                "defaults_meets_slos": within is not None,
                "defaults_load": shown.load if shown else None,
                "defaults_throughput": shown.throughput if shown else None,
                "defaults_rung": measurement.rung,
                "winner_load": winner_point.load,
                "winner_throughput": winner_point.throughput,
                "winner_rung": winner_measurement.rung if winner_measurement else None,
                "ratio": winner_point.throughput / within.throughput
                if within is not None and within.throughput > 0
                else None,
            }
        )
        gains[-1]["text"] = gain_text(gains[-1])
    return gains


def gain_text(gain: dict[str, Any]) -> str:
    """``1.84x (2,410.2 against 1,310.0 at load 8 within the SLOs)``, as the report writes it."""
    if gain["is_winner"]:
        return "the winner itself: no knob tried did better"
    winner = f"{gain['winner_throughput']:,.1f} at load {gain['winner_load']:g}"
    if gain["defaults_throughput"] is None:
        return f"no valid load point of the defaults (winner {winner})"
    defaults = f"{gain['defaults_throughput']:,.1f} at load {gain['defaults_load']:g}"
    if gain["ratio"] is None:
        return f"the defaults met the SLOs at no load (their best: {defaults}; winner {winner})"
    return f"{gain['ratio']:.2f}x ({winner} against {defaults}, both within the SLOs)"
