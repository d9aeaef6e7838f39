"""Open-loop schedules: the drawn send times have the asked rate and dispersion, from the seed alone."""

from __future__ import annotations

import numpy as np
import pytest

from modelyard.bench.schedule import closed_loop_start_offsets_s, open_loop_send_times_s
from modelyard.errors import InvalidInput

RATE_PER_S = 20.0
COUNT = 4000


def _gaps(times_s: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times_s))


def test_poisson_schedule_has_the_rate_and_exponential_dispersion() -> None:
    gaps = _gaps(open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=COUNT, arrival="poisson", seed=7))
    assert 1 / gaps.mean() == pytest.approx(RATE_PER_S, rel=0.05)
    # Exponential gaps: coefficient of variation 1.
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.06)


@pytest.mark.parametrize(("burstiness", "expected_cv"), [(0.25, 2.0), (4.0, 0.5)])
def test_gamma_schedule_dispersion_follows_burstiness(burstiness: float, expected_cv: float) -> None:
    times = open_loop_send_times_s(
        rate_per_s=RATE_PER_S, num_requests=COUNT, arrival="gamma", burstiness=burstiness, seed=7
    )
    gaps = _gaps(times)
    assert 1 / gaps.mean() == pytest.approx(RATE_PER_S, rel=0.08)
    # Gamma with shape k: coefficient of variation 1 / sqrt(k).
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, rel=0.1)


def test_constant_schedule_is_evenly_spaced() -> None:
    times = open_loop_send_times_s(rate_per_s=4, num_requests=5, arrival="constant")
    assert times == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    first = open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=50, seed=3)
    assert first == open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=50, seed=3)
    assert first != open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=50, seed=4)


def test_duration_bounds_the_schedule() -> None:
    times = open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=None, duration_s=10.0, seed=1)
    assert max(times) < 10.0
    assert len(times) == pytest.approx(RATE_PER_S * 10, rel=0.2)


def test_ramp_up_sends_fewer_requests_early() -> None:
    times = np.asarray(
        open_loop_send_times_s(rate_per_s=RATE_PER_S, num_requests=None, duration_s=40.0, ramp_up_s=20.0)
    )
    during_ramp = np.sum(times < 20.0)
    after_ramp = np.sum((times >= 20.0) & (times < 40.0))
    # A linear ramp delivers half the full rate's requests over its length.
    assert during_ramp / after_ramp == pytest.approx(0.5, abs=0.12)


def test_closed_loop_workers_start_evenly_over_the_ramp() -> None:
    assert closed_loop_start_offsets_s(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert closed_loop_start_offsets_s(3, 0.0) == [0.0, 0.0, 0.0]


def test_bad_rates_are_refused_with_the_value() -> None:
    with pytest.raises(InvalidInput, match="got 0"):
        open_loop_send_times_s(rate_per_s=0, num_requests=10)
    with pytest.raises(InvalidInput, match="burstiness"):
        open_loop_send_times_s(rate_per_s=1, num_requests=10, arrival="gamma", burstiness=0)
