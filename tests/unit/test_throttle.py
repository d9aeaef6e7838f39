"""Failed authentications per address: free tries, then a doubling wait; loopback never waits."""

from __future__ import annotations

import pytest

from modelyard.errors import TooManyRequests
from modelyard.server.throttle import FailureThrottle, address_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_after_the_free_failures_each_one_doubles_the_wait() -> None:
    clock = Clock()
    throttle = FailureThrottle(free_failures=3, base_delay_s=1.0, clock=clock)
    waits = []
    for _ in range(7):
        throttle.check("203.0.113.7")
        throttle.failed("203.0.113.7")
        try:
            throttle.check("203.0.113.7")
            waits.append(0)
        except TooManyRequests as error:
            waits.append(error.retry_after_seconds)
            clock.now += error.retry_after_seconds
    assert waits == [0, 0, 1, 2, 4, 8, 16]


def test_a_waiting_address_is_refused_with_retry_after_and_others_are_not() -> None:
    throttle = FailureThrottle(free_failures=1, base_delay_s=30.0, clock=Clock())
    throttle.failed("203.0.113.7")
    with pytest.raises(TooManyRequests) as refused:
        throttle.check("203.0.113.7")
    assert refused.value.retry_after_seconds == 30
    assert "try again in 30 s" in refused.value.message
    throttle.check("203.0.113.8")


def test_a_success_clears_the_address_and_failures_are_forgotten_after_a_while() -> None:
    clock = Clock()
    throttle = FailureThrottle(free_failures=5, forget_after_s=900.0, clock=clock)
    for _ in range(4):
        throttle.failed("198.51.100.1")
    throttle.succeeded("198.51.100.1")
    assert throttle.failures("198.51.100.1") == 0
    for _ in range(4):
        throttle.failed("198.51.100.1")
    clock.now += 901
    throttle.failed("198.51.100.1")
    assert throttle.failures("198.51.100.1") == 1


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_the_host_itself_is_never_held_back(address: str) -> None:
    throttle = FailureThrottle(free_failures=0, clock=Clock())
    for _ in range(100):
        throttle.failed(address)
    throttle.check(address)


def test_ipv6_addresses_count_per_64() -> None:
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::5") != address_key("2001:db8:1:2::5")
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"
