"""Retry-After of a limit's 429 is the truth: a retry at Retry-After is admitted, a retry before it
is refused with the time still left, in whole seconds rounded up (RFC 9110). On a clock of ours."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from modelyard.control.endpoints import DeploymentLimits
from modelyard.server.gateway.limit_counters import SlidingCounters
from modelyard.server.gateway.limits import Admission, KeyLimits, Limiter, LimitExceeded, seconds_until_room
from modelyard.server.gateway.shared_counters import SharedCounters


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _limiter(clock: Clock) -> Limiter:
    shared = SharedCounters.private()
    return Limiter(
        SlidingCounters.for_keys(shared),
        SlidingCounters.for_deployments(shared),
        quota_used=lambda _key, _start: 0,
        clock=clock,
    )


def _admit(
    limiter: Limiter, limits: KeyLimits, payload: dict[str, int], deployment: DeploymentLimits | None = None
) -> Admission:
    return limiter.admit(1, limits, payload, body_bytes=0, deployment=deployment, deployment_name="chat")


def _refusal(
    limiter: Limiter, limits: KeyLimits, payload: dict[str, int], deployment: DeploymentLimits | None = None
) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as refused:
        _admit(limiter, limits, payload, deployment)
    return refused.value


def test_a_per_minute_limit_filled_late_in_a_minute_says_when_the_window_has_room() -> None:
    """The issue's case: 10 requests 57 s into a minute. Before: Retry-After 3, and the retry at
    3.5 s was refused with Retry-After 60."""
    clock = Clock(600.0 + 57)
    limiter = _limiter(clock)
    limits = KeyLimits(requests_per_minute=10)
    for _ in range(10):
        limiter.admit(1, limits, {}, body_bytes=0)
    refused = _refusal(limiter, limits, {})
    # 10 x (60 - y)/60 + 1 <= 10 from y = 6 s into the next minute: 3 + 6 s.
    assert refused.retry_after_seconds == 9
    clock.now += 3.5
    assert _refusal(limiter, limits, {}).retry_after_seconds == 6  # 5.5 s left, rounded up
    clock.now += 5.5
    limiter.admit(1, limits, {}, body_bytes=0)


@pytest.mark.parametrize("seed", range(12))
def test_under_any_traffic_a_retry_at_retry_after_is_admitted_and_one_before_is_not(seed: int) -> None:
    """Bursts at random moments against a key's requests and tokens per minute and its
    deployment's; after each 429 with Retry-After R: a retry 1 s and R - 1 s later is refused
    with what is left, one at R is admitted."""
    randomness = random.Random(seed)
    clock = Clock(600.0 + randomness.uniform(0, 60))
    limiter = _limiter(clock)
    limits = KeyLimits(requests_per_minute=randomness.choice([1, 3, 10, 60]), tokens_per_minute=2_000)
    deployment = DeploymentLimits(deployment_id=9, requests_per_minute=randomness.choice([2, 7, 40]))
    refusals = 0
    for _ in range(150):
        payload = {"max_tokens": randomness.choice([10, 100, 400])}
        try:
            admission = _admit(limiter, limits, payload, deployment)
        except LimitExceeded as refused:
            refusals += 1
            wait_s = refused.retry_after_seconds
            moment = clock.now
            for early_s in sorted({1, wait_s - 1}):
                if 0 < early_s < wait_s:
                    clock.now = moment + early_s
                    assert (
                        _refusal(limiter, limits, payload, deployment).retry_after_seconds == wait_s - early_s
                    )
            clock.now = moment + wait_s
            admission = _admit(limiter, limits, payload, deployment)
        limiter.finish(admission, used_tokens=randomness.randint(0, payload["max_tokens"]))
        clock.now += randomness.choice([0.0, 0.0, 0.3, 2.0, 17.0])
    assert refusals > 5


def test_a_quota_says_when_it_renews_and_a_retry_then_is_admitted() -> None:
    clock = Clock(datetime(2026, 12, 6, 23, 59, 50, 500_000, tzinfo=UTC).timestamp())
    limiter = _limiter(clock)
    limits = KeyLimits(token_quota=100, quota_period="day")
    limiter.finish(limiter.admit(1, limits, {"max_tokens": 100}, body_bytes=0), used_tokens=100)
    refused = _refusal(limiter, limits, {"max_tokens": 10})
    assert refused.retry_after_seconds == 10  # 9.5 s to midnight, rounded up
    clock.now += 9
    assert _refusal(limiter, limits, {"max_tokens": 10}).retry_after_seconds == 1
    clock.now += 0.5
    limiter.admit(1, limits, {"max_tokens": 10}, body_bytes=0)


def test_the_longest_wait_of_every_limit_that_refuses_is_sent() -> None:
    clock = Clock(600.0)
    limiter = _limiter(clock)
    limits = KeyLimits(requests_per_minute=100, tokens_per_minute=1000)
    limiter.admit(1, limits, {"max_tokens": 1000}, body_bytes=0)
    clock.now += 30
    deployment = DeploymentLimits(deployment_id=2, requests_per_minute=1)
    limiter.admit(2, KeyLimits(), {}, body_bytes=0, deployment=deployment, deployment_name="chat")
    # The key's 1000 tokens, counted at the start of this minute, leave room for 1 more 0.06 s
    # into the next (31 s from now); the deployment's request, counted 30 s into this minute,
    # weighs in the sliding window until the next minute has passed (90 s from now).
    key_alone = _refusal(limiter, limits, {"max_tokens": 1})
    assert key_alone.retry_after_seconds == 31
    refused = _refusal(limiter, limits, {"max_tokens": 1}, deployment)
    assert refused.retry_after_seconds == 90
    assert "deployment 'chat'" in refused.message


def test_a_request_larger_than_the_limit_is_told_so_not_when_to_retry() -> None:
    limiter = _limiter(Clock(600.0))
    refused = _refusal(limiter, KeyLimits(tokens_per_minute=500), {"max_tokens": 1000})
    assert refused.never
    assert "may use 1000 tokens (max_tokens plus the prompt), more than the limit of 500" in refused.message
    quota = _refusal(limiter, KeyLimits(token_quota=500, quota_period="month"), {"max_tokens": 1000})
    assert quota.never and "whole quota of 500 tokens per month" in quota.message


@pytest.mark.parametrize(
    ("current", "previous", "into_s", "allowed", "wait_s"),
    [
        (0, 10, 15, 9, 0.0),  # 10 x 45/60 = 7.5: room now
        (2, 10, 15, 9, 3),  # 2 + 10 x (60 - x)/60 <= 9 at x = 18 s
        (10, 0, 57, 9, 9),  # the next minute, 6 s in
        (10, 10, 30, 9, 36),  # this minute ends (30 s), then 6 s of the next
        (5, 0, 0, -1, None),  # more than the limit by itself
    ],
)
def test_seconds_until_room(
    current: float, previous: float, into_s: float, allowed: float, wait_s: float | None
) -> None:
    found = seconds_until_room(current, previous, into_s, allowed)
    if wait_s is None:
        assert found is None
    else:
        assert found == pytest.approx(wait_s)
