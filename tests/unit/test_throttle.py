"""Failed authentications per address: free tries, then a doubling wait; loopback never waits;
an attempt is counted before it is checked, so parallel guesses cannot all pass."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from modelyard.errors import TooManyRequests, Unauthorized
from modelyard.server.throttle import FailureThrottle, address_key, guarded
from modelyard.server.throttle_table import ThrottleTable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wrong(address: str) -> None:
    raise Unauthorized(f"wrong password from {address}")


def test_after_the_free_failures_each_one_doubles_the_wait() -> None:
    clock = Clock()
    throttle = FailureThrottle(free_failures=3, base_delay_s=1.0, clock=clock)
    waits = []
    for _ in range(7):
        throttle.charge("203.0.113.7")
        try:
            throttle.check("203.0.113.7")
            waits.append(0)
        except TooManyRequests as error:
            waits.append(error.retry_after_seconds)
            clock.now += error.retry_after_seconds
    assert waits == [0, 0, 1, 2, 4, 8, 16]


def test_a_waiting_address_is_refused_with_retry_after_and_others_are_not() -> None:
    throttle = FailureThrottle(free_failures=1, base_delay_s=30.0, clock=Clock())
    throttle.charge("203.0.113.7")
    with pytest.raises(TooManyRequests) as refused:
        throttle.charge("203.0.113.7")
    assert refused.value.retry_after_seconds == 30
    assert "try again in 30 s" in refused.value.message
    throttle.check("203.0.113.8")


def test_a_retry_at_retry_after_is_admitted_and_one_before_is_told_the_time_left() -> None:
    clock = Clock()
    throttle = FailureThrottle(free_failures=1, base_delay_s=2.5, clock=clock)
    throttle.charge("203.0.113.7")
    with pytest.raises(TooManyRequests) as refused:
        throttle.charge("203.0.113.7")
    assert refused.value.retry_after_seconds == 3  # 2.5 s, rounded up
    clock.now += 1.0
    with pytest.raises(TooManyRequests) as again:
        throttle.charge("203.0.113.7")
    assert again.value.retry_after_seconds == 2  # 1.5 s left
    clock.now += 2.0
    throttle.charge("203.0.113.7")


def test_parallel_wrong_passwords_run_exactly_the_allowance_of_checks() -> None:
    """150 guesses at once; each check waits until every guess has either entered a check or
    been refused, so a throttle that checks before it counts lets them all in."""
    throttle = FailureThrottle(free_failures=5, clock=Clock())
    guesses = 150
    progress = threading.Condition()
    entered = refused = 0

    def slow_wrong_password() -> None:
        nonlocal entered
        with progress:
            entered += 1
            progress.notify_all()
            progress.wait_for(lambda: entered + refused == guesses, timeout=30)
        raise Unauthorized("wrong username or password")

    def guess(_: int) -> str:
        nonlocal refused
        try:
            guarded(throttle, "203.0.113.7", slow_wrong_password)
        except Unauthorized:
            return "401"
        except TooManyRequests:
            with progress:
                refused += 1
                progress.notify_all()
            return "429"
        return "200"

    with concurrent.futures.ThreadPoolExecutor(max_workers=guesses) as pool:
        answers = list(pool.map(guess, range(guesses)))
    assert entered == 5
    assert answers.count("401") == 5 and answers.count("429") == 145
    assert throttle.counts() == (5, 145)


def test_a_right_attempt_is_given_back_but_does_not_clear_other_failures() -> None:
    throttle = FailureThrottle(free_failures=5, clock=Clock())
    for _ in range(3):
        with pytest.raises(Unauthorized):
            guarded(throttle, "198.51.100.1", wrong, "198.51.100.1")
    assert guarded(throttle, "198.51.100.1", lambda: "admin") == "admin"
    assert throttle.failures("198.51.100.1") == 3


def test_an_attempt_that_fails_otherwise_is_given_back() -> None:
    throttle = FailureThrottle(free_failures=5, clock=Clock())

    def database_down() -> None:
        raise OSError("database is locked")

    with pytest.raises(OSError):
        guarded(throttle, "198.51.100.1", database_down)
    assert throttle.failures("198.51.100.1") == 0


def test_failures_are_forgotten_after_a_while() -> None:
    clock = Clock()
    throttle = FailureThrottle(free_failures=5, forget_after_s=900.0, clock=clock)
    for _ in range(4):
        throttle.charge("198.51.100.1")
    clock.now += 901
    throttle.charge("198.51.100.1")
    assert throttle.failures("198.51.100.1") == 1


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_the_host_itself_is_never_held_back(address: str) -> None:
    throttle = FailureThrottle(free_failures=0, clock=Clock())
    for _ in range(100):
        throttle.charge(address)
    throttle.check(address)


def test_ipv6_addresses_count_per_64() -> None:
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::5") != address_key("2001:db8:1:2::5")
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"


def test_a_full_bucket_forgets_its_oldest_address_first() -> None:
    clock = Clock()
    throttle = FailureThrottle(
        free_failures=1, base_delay_s=60.0, clock=clock, table=ThrottleTable.private(buckets=1)
    )
    addresses = [f"198.51.100.{n}" for n in range(9)]  # one more than a bucket holds
    for address in addresses:
        throttle.charge(address)
        clock.now += 1
    assert throttle.failures(addresses[0]) == 0
    assert all(throttle.failures(address) == 1 for address in addresses[1:])


_GUESSER = """
import sys
from pathlib import Path
from modelyard.errors import TooManyRequests
from modelyard.server.throttle import FailureThrottle
from modelyard.server.throttle_table import ThrottleTable
table = ThrottleTable.attach(sys.argv[1], Path(sys.argv[2]))
throttle = FailureThrottle(free_failures=5, base_delay_s=3600.0, table=table)
sys.stdin.readline()  # every guesser starts at once
admitted = 0
for _ in range(200):
    try:
        throttle.charge("203.0.113.9")
        admitted += 1
    except TooManyRequests:
        pass
table.close()
print(admitted)
"""


def test_processes_sharing_a_table_admit_the_allowance_in_all(tmp_path: Path) -> None:
    """Four processes (as gateway workers) guess 200 times each from one address."""
    table = ThrottleTable.create(tmp_path / "throttle.lock")
    try:
        guessers = [
            subprocess.Popen(
                [sys.executable, "-c", _GUESSER, table.name, str(table.lock_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for guesser in guessers:
            assert guesser.stdin is not None
            guesser.stdin.write("go\n")
            guesser.stdin.flush()
        outputs = [guesser.communicate(timeout=60)[0] for guesser in guessers]
        assert sum(int(output) for output in outputs) == 5
        assert table.counts() == (5, 795)
    finally:
        table.close(unlink=True)
