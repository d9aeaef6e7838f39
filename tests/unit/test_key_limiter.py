"""The sliding minute, reservations settled by real usage, and concurrency, on a clock of our own."""

from __future__ import annotations

import pytest

from modelyard.server.gateway.limits import InProcessCounters, KeyLimiter, KeyLimits, LimitExceeded


class Clock:
    def __init__(self) -> None:
        self.now = 600.0  # the start of a minute

    def __call__(self) -> float:
        return self.now


def _limiter(clock: Clock) -> KeyLimiter:
    return KeyLimiter(InProcessCounters(), quota_used=lambda _key, _start: 0, clock=clock)


def test_the_previous_minute_counts_by_how_much_of_it_is_still_inside_the_last_60_s() -> None:
    clock = Clock()
    limiter = _limiter(clock)
    limits = KeyLimits(requests_per_minute=10)
    for _ in range(10):
        limiter.admit(1, limits, {}, body_bytes=0)
    clock.now += 60 + 15  # 15 s into the next minute: 10 x 45/60 = 7.5 still count
    admitted = 0
    with pytest.raises(LimitExceeded) as refused:
        while True:
            limiter.admit(1, limits, {}, body_bytes=0)
            admitted += 1
    assert admitted == 2
    assert refused.value.retry_after_seconds == 45


def test_a_reservation_is_replaced_by_what_the_request_used() -> None:
    clock = Clock()
    limiter = _limiter(clock)
    limits = KeyLimits(tokens_per_minute=1000)
    admission = limiter.admit(1, limits, {"max_tokens": 900}, body_bytes=400)  # 900 + 100 reserved
    with pytest.raises(LimitExceeded, match="requested 1"):
        limiter.admit(1, limits, {}, body_bytes=4)
    limiter.finish(admission, used_tokens=120)
    limiter.admit(1, limits, {"max_tokens": 800}, body_bytes=0)


def test_a_finished_request_frees_its_slot_once() -> None:
    limiter = _limiter(Clock())
    limits = KeyLimits(max_concurrent_requests=1)
    admission = limiter.admit(1, limits, {}, body_bytes=0)
    with pytest.raises(LimitExceeded, match="1 of 1 requests"):
        limiter.admit(1, limits, {}, body_bytes=0)
    limiter.finish(admission, 0)
    limiter.finish(admission, 0)
    second = limiter.admit(1, limits, {}, body_bytes=0)
    with pytest.raises(LimitExceeded):
        limiter.admit(1, limits, {}, body_bytes=0)
    limiter.finish(second, 0)


def test_a_key_without_limits_is_never_counted() -> None:
    limiter = _limiter(Clock())
    for _ in range(1000):
        limiter.finish(limiter.admit(1, KeyLimits(), {"max_tokens": 10**9}, body_bytes=10**9), 10**9)
