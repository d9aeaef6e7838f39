"""The sliding minute, reservations settled by real usage, and concurrency, on a clock of our own."""

from __future__ import annotations

import pytest

from modelyard.control.endpoints import DeploymentLimits
from modelyard.server.gateway.limit_counters import SlidingCounters
from modelyard.server.gateway.limits import KeyLimits, Limiter, LimitExceeded
from modelyard.server.gateway.shared_counters import SharedCounters


class Clock:
    def __init__(self) -> None:
        self.now = 600.0  # the start of a minute

    def __call__(self) -> float:
        return self.now


def _limiter(clock: Clock, shared: SharedCounters | None = None) -> Limiter:
    shared = shared or SharedCounters.private()
    return Limiter(
        SlidingCounters.for_keys(shared),
        SlidingCounters.for_deployments(shared),
        quota_used=lambda _key, _start: 0,
        clock=clock,
    )


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
    # 2 + 10 x (60 - x)/60 + 1 <= 10 from x = 18 s into the minute: 3 s from now.
    assert refused.value.retry_after_seconds == 3


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


def test_two_workers_admit_a_keys_requests_per_minute_together() -> None:
    # Two workers' limiters on one shared segment, each writing its own row.
    clock = Clock()
    shared = SharedCounters.create(workers=2)
    other_view = SharedCounters(shared._views[0], workers=2, row=1, memory=None)
    try:
        first, second = _limiter(clock, shared), _limiter(clock, other_view)
        limits = KeyLimits(requests_per_minute=5, max_concurrent_requests=4)
        admitted = [first.admit(7, limits, {}, body_bytes=0) for _ in range(2)]
        admitted += [second.admit(7, limits, {}, body_bytes=0) for _ in range(2)]
        with pytest.raises(LimitExceeded, match="4 of 4 requests of this key are running"):
            first.admit(7, limits, {}, body_bytes=0)
        second.finish(admitted.pop(), 0)
        admitted.append(first.admit(7, limits, {}, body_bytes=0))
        first.finish(admitted.pop(1), 0)
        with pytest.raises(LimitExceeded, match="requests per minute: limit 5, used 5"):
            second.admit(7, limits, {}, body_bytes=0)
        shared.clear_row(1)  # worker 1 died: its request still running is gone
        assert first.key_counters.in_flight(7) == 2
        clock.now += 120  # two minutes on: both workers' buckets are stale
        for admission in (admitted[0], admitted[2]):
            first.finish(admission, 0)
        assert first.key_counters.in_flight(7) == 0
        second.admit(7, limits, {}, body_bytes=0)
    finally:
        other_view.close()
        shared.close(unlink=True)


def test_a_deployments_limit_holds_for_every_key_together() -> None:
    limiter = _limiter(Clock())
    deployment = DeploymentLimits(deployment_id=3, requests_per_minute=3)
    for key_id in (1, 2, 3):
        limiter.admit(key_id, KeyLimits(), {}, body_bytes=0, deployment=deployment, deployment_name="chat")
    refused = "rate limit of deployment 'chat' reached for requests per minute: limit 3, used 3"
    with pytest.raises(LimitExceeded, match=refused):
        limiter.admit(4, KeyLimits(), {}, body_bytes=0, deployment=deployment, deployment_name="chat")
    other = DeploymentLimits(deployment_id=4, requests_per_minute=3)
    limiter.admit(4, KeyLimits(), {}, body_bytes=0, deployment=other, deployment_name="other")


def test_the_main_processs_recorded_usage_closes_a_quota_this_worker_did_not_use() -> None:
    limiter = _limiter(Clock())
    limits = KeyLimits(token_quota=1000, quota_period="day")
    admission = limiter.admit(9, limits, {"max_tokens": 100}, body_bytes=0)
    start = admission.quota_period_start
    assert start is not None
    # The other workers' answers: 850 tokens recorded in usage_records.
    limiter.quota_recorded(9, start, 850)
    with pytest.raises(LimitExceeded, match="token quota reached: 950 of 1000"):
        limiter.admit(9, limits, {"max_tokens": 100}, body_bytes=0)
    limiter.finish(admission, used_tokens=40)
    limiter.admit(9, limits, {"max_tokens": 100}, body_bytes=0)


def test_a_workers_finished_tokens_count_until_the_main_process_has_recorded_them() -> None:
    limiter = _limiter(Clock())
    sequence = [0]
    limiter.last_usage_sequence = lambda: sequence[0]
    limits = KeyLimits(token_quota=1000, quota_period="day")
    first = limiter.admit(5, limits, {"max_tokens": 100}, body_bytes=0)
    assert first.quota_period_start is not None
    limiter.quota_recorded(5, first.quota_period_start, 0)
    sequence[0] = 1  # its usage row
    limiter.finish(first, used_tokens=700)
    # Recorded 0, but this worker's 700 are on their way: 700 + 400 > 1000.
    with pytest.raises(LimitExceeded, match="token quota reached: 700 of 1000"):
        limiter.admit(5, limits, {"max_tokens": 400}, body_bytes=0)
    # The main process's total (with the 700) arrives before its acknowledgement.
    limiter.quota_recorded(5, first.quota_period_start, 700)
    limiter.quota_committed(1)
    with pytest.raises(LimitExceeded, match="token quota reached: 700 of 1000"):
        limiter.admit(5, limits, {"max_tokens": 400}, body_bytes=0)
    limiter.admit(5, limits, {"max_tokens": 300}, body_bytes=0)
