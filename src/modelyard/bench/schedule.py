"""Open-loop send schedules, drawn whole and up front from a seed.

    times_s = open_loop_send_times_s(rate_per_s=10, num_requests=500, arrival="gamma", burstiness=0.5, seed=0)

Gaps between sends are independent draws: exponential for ``poisson`` (gamma shape 1), gamma with
shape ``burstiness`` and mean ``1 / rate`` for ``gamma`` (below 1 burstier, above 1 more even), and
exactly ``1 / rate`` for ``constant``. With a ramp-up the rate grows linearly from 0 to the target
over ``ramp_up_s`` (the same draws, mapped through the ramp's cumulative intensity), so the
schedule's shape does not depend on the ramp. The same arguments always give the same schedule.
"""

from __future__ import annotations

import math

import numpy as np

from modelyard.bench.records import ArrivalKind
from modelyard.errors import InvalidInput

MAX_SCHEDULED_REQUESTS = 10_000_000


def _gaps_s(
    rng: np.random.Generator, count: int, rate_per_s: float, arrival: ArrivalKind, burstiness: float
) -> list[float]:
    if arrival == "constant":
        return [1.0 / rate_per_s] * count
    shape = 1.0 if arrival == "poisson" else burstiness
    gaps: list[float] = rng.gamma(shape, 1.0 / (rate_per_s * shape), size=count).tolist()
    return gaps


def _ramp(time_s: float, ramp_up_s: float) -> float:
    """Map a time of the steady process to the ramped one (rate growing linearly over ramp_up_s)."""
    if ramp_up_s <= 0:
        return time_s
    if time_s < ramp_up_s / 2:
        return math.sqrt(2.0 * ramp_up_s * time_s)
    return time_s + ramp_up_s / 2


def open_loop_send_times_s(
    *,
    rate_per_s: float,
    num_requests: int | None,
    arrival: ArrivalKind = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
    duration_s: float | None = None,
    ramp_up_s: float = 0.0,
) -> list[float]:
    """Send times in seconds from the start, ascending; the first request goes at 0.

    Stops at ``num_requests`` sends, or at the last send before ``duration_s``, whichever comes first.
    """
    if not rate_per_s > 0 or math.isinf(rate_per_s):
        raise InvalidInput(
            f"request rate must be a positive number, got {rate_per_s}", hint="e.g. --request-rate 5"
        )
    if arrival == "gamma" and not burstiness > 0:
        raise InvalidInput(
            f"burstiness must be > 0, got {burstiness}", hint="1 is Poisson; 0.5 burstier; 4 even"
        )
    if num_requests is None and duration_s is None:
        raise InvalidInput("an open-loop schedule needs a request count or a duration")
    limit = num_requests if num_requests is not None else MAX_SCHEDULED_REQUESTS
    rng = np.random.default_rng(seed)
    times_s: list[float] = []
    steady_s = 0.0
    batch = max(16, min(limit, int(rate_per_s * (duration_s or 0.0) * 1.2) + 16))
    while len(times_s) < limit:
        for gap_s in _gaps_s(rng, batch, rate_per_s, arrival, burstiness):
            time_s = _ramp(steady_s, ramp_up_s)
            if duration_s is not None and time_s >= duration_s:
                return times_s
            times_s.append(time_s)
            if len(times_s) >= limit:
                return times_s
            steady_s += gap_s
    return times_s


def closed_loop_start_offsets_s(concurrency: int, ramp_up_s: float) -> list[float]:
    """When each of the ``concurrency`` workers sends its first request: evenly over the ramp-up."""
    if concurrency < 1:
        raise InvalidInput(f"concurrency must be >= 1, got {concurrency}")
    if ramp_up_s <= 0:
        return [0.0] * concurrency
    return [ramp_up_s * index / concurrency for index in range(concurrency)]
