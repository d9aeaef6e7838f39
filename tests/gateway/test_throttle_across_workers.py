"""Wrong API keys are throttled once for every gateway worker, and counted before they are read.

A real ``modelyard serve`` with two gateway workers (the module's ``served_platform``). The
guesses come from documentation addresses (``X-Forwarded-For``, trusted from loopback as from
nginx in front) on fresh connections, which the kernel spreads over both workers.
"""

from __future__ import annotations

import asyncio
import math
import time

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .served import ServedPlatform

ALLOWANCE = 5  # FailureThrottle.free_failures


@pytest.fixture(scope="module")
def platform(served_platform: ServedPlatform) -> ServedPlatform:
    """The session's server with two gateway workers (no deployment needed: /v1/models answers)."""
    return served_platform


def _statuses_at_once(platform: ServedPlatform, requests: list[dict[str, str]]) -> list[int]:
    async def one(headers: dict[str, str]) -> int:
        async with httpx.AsyncClient(
            base_url=platform.url, timeout=120, verify=shared_tls_context()
        ) as client:  # its own connection
            return (await client.get("/v1/models", headers=headers)).status_code

    async def every() -> list[int]:
        return list(await asyncio.gather(*(one(headers) for headers in requests)))

    return asyncio.run(every())


def _throttle_count(platform: ServedPlatform, outcome: str) -> float:
    prefix = f'modelyard_auth_throttle_attempts_total{{outcome="{outcome}",throttle="api_key"}}'
    lines = [line for line in platform.metrics().splitlines() if line.startswith(prefix)]
    assert lines, "no API-key throttle counts in /metrics"
    return float(lines[0].rsplit(" ", 1)[1])


def _extra_admissions(elapsed_s: float) -> int:
    """Tries let through after the allowance: one each time a wait (1, 2, 4 s ...) ran out."""
    return 1 + math.floor(math.log2(1 + elapsed_s))


def test_parallel_wrong_keys_through_two_workers_get_the_allowance_of_401s(platform: ServedPlatform) -> None:
    admitted_before = _throttle_count(platform, "admitted")
    guesses = [
        {"Authorization": f"Bearer my-guess-{n:04d}", "X-Forwarded-For": "203.0.113.50"} for n in range(300)
    ]
    started = time.monotonic()
    statuses = _statuses_at_once(platform, guesses)
    elapsed_s = time.monotonic() - started
    assert set(statuses) == {401, 429}
    # Before the shared, counted-first throttle: 296 of 300 answered 401 (each a database read).
    assert statuses.count(401) <= ALLOWANCE + _extra_admissions(elapsed_s), (statuses.count(401), elapsed_s)
    assert _throttle_count(platform, "admitted") - admitted_before == statuses.count(401)


def test_a_good_key_is_refused_while_its_address_waits_and_served_elsewhere(platform: ServedPlatform) -> None:
    key = platform.create_key("throttled-neighbour")
    address = "203.0.113.51"
    # Guess until the address must wait at least 2 s more: the good key comes well within that.
    # Bounded by time, not by a count of guesses: refusals cost nothing and are answered in a few
    # milliseconds, so a fast host could spend any count inside the first 1 s wait.
    retry_after_s = 0
    deadline = time.monotonic() + 60
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        with httpx.Client(base_url=platform.url, timeout=30, verify=shared_tls_context()) as client:
            guess = client.get(
                "/v1/models",
                headers={"Authorization": f"Bearer my-try-{attempt}", "X-Forwarded-For": address},
            )
        if guess.status_code == 429:
            retry_after_s = int(guess.headers["Retry-After"])
            if retry_after_s >= 2:
                break
    assert retry_after_s >= 2
    waiting = _statuses_at_once(platform, [{"Authorization": f"Bearer {key}", "X-Forwarded-For": address}])
    elsewhere = _statuses_at_once(
        platform, [{"Authorization": f"Bearer {key}", "X-Forwarded-For": "203.0.113.52"}]
    )
    assert waiting == [429]
    assert elsewhere == [200]


def test_parallel_requests_with_one_good_key_are_not_throttled(platform: ServedPlatform) -> None:
    """They join one read of the key: only that read is counted, and given back."""
    key = platform.create_key("many-at-once")
    statuses = _statuses_at_once(
        platform, [{"Authorization": f"Bearer {key}", "X-Forwarded-For": "203.0.113.53"}] * 60
    )
    assert statuses == [200] * 60
