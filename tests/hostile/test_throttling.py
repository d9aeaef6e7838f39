"""Guessing is throttled per client address: wrong passwords and wrong API keys are answered 429
with Retry-After after a few, at no cost to the server, while the admin on the host itself is
never held back.

The clients seem to come from documentation addresses (203.0.113.0/24): the requests go to the
server on loopback with ``X-Forwarded-For``, which uvicorn trusts from a proxy on the host, as
it would from nginx in front of modelyard. No traffic goes anywhere but loopback.
"""

from __future__ import annotations

import asyncio
import math
import time

import httpx

from modelyard.server.door.limits import RequestLimits
from modelyard.testing.http_clients import shared_tls_context

from .conftest import HostileTarget

# Parallel guesses, each on its own connection: below the door's cap on connections reading their
# head at once, past which a new connection has only a second to send its head (on a loaded
# machine the client's own loop may take longer to write 150 heads than that).
PARALLEL_GUESSES = RequestLimits().max_slow_connections - 8


def _from(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def _assert_throttled(statuses: list[int], elapsed_s: float) -> None:
    """5 free failures, then 429s; a try gets through (and doubles the wait: 1, 2, 4 s ...) only
    each time a wait has run out, so at most log2 of the elapsed seconds more 401s."""
    assert statuses[:6] == [401] * 5 + [429]
    later_failures = statuses[6:].count(401)
    assert later_failures <= 1 + math.log2(1 + elapsed_s), (later_failures, elapsed_s)
    assert set(statuses[6:]) <= {401, 429}


def test_wrong_passwords_from_one_address_get_429_and_the_admin_on_the_host_is_not_held_back(
    target: HostileTarget,
) -> None:
    responses: list[httpx.Response] = []
    started = time.monotonic()
    with target.client() as client:
        for attempt in range(40):
            responses.append(
                client.get("/api/v1/system", auth=("admin", f"guess-{attempt}"), headers=_from("203.0.113.7"))
            )
        elapsed_s = time.monotonic() - started
        statuses = [response.status_code for response in responses]
        refused = responses[5]
        right_password_meanwhile = client.get(
            "/api/v1/system", auth=("admin", target.password), headers=_from("203.0.113.7")
        )
        other_address = client.get("/api/v1/system", auth=("admin", "guess"), headers=_from("203.0.113.8"))
        from_the_host = client.get("/api/v1/system", auth=("admin", target.password))
    _assert_throttled(statuses, elapsed_s)
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "too_many_requests"
    assert "too many failed login attempts from 203.0.113.7" in error["message"]
    assert right_password_meanwhile.status_code == 429  # no guess gets through while it waits
    assert other_address.status_code == 401
    assert from_the_host.status_code == 200


def test_unknown_users_are_throttled_like_wrong_passwords(target: HostileTarget) -> None:
    started = time.monotonic()
    with target.client() as client:
        statuses = [
            client.get("/api/v1/system", auth=(f"user{n}", "guess"), headers=_from("203.0.113.9")).status_code
            for n in range(8)
        ]
    _assert_throttled(statuses, time.monotonic() - started)


def test_random_api_keys_from_one_address_get_openai_shaped_429(target: HostileTarget) -> None:
    responses: list[httpx.Response] = []
    started = time.monotonic()
    with httpx.Client(base_url=target.url, timeout=60, verify=shared_tls_context()) as client:
        for attempt in range(300):
            responses.append(
                client.post(
                    "/v1/chat/completions",
                    json={"model": "demo", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"Authorization": f"Bearer my-random-{attempt:04d}", **_from("203.0.113.10")},
                )
            )
    statuses = [response.status_code for response in responses]
    _assert_throttled(statuses, time.monotonic() - started)
    assert statuses.count(429) > 250
    response = responses[5]
    assert int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["type"] == "rate_limit_error"
    assert "too many failed API key attempts" in error["message"]


def _login_checks(target: HostileTarget) -> float:
    """Password checks the login throttle let run (``/metrics``), from other hosts."""
    token = (target.data_dir / "metrics-token").read_text().strip()
    with target.client() as client:
        text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    prefix = 'modelyard_auth_throttle_attempts_total{outcome="admitted",throttle="login"}'
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert lines, "no login throttle counts in /metrics"
    return float(lines[0].rsplit(" ", 1)[1])


def test_parallel_wrong_passwords_run_only_the_allowance_of_password_checks(target: HostileTarget) -> None:
    async def guess(attempt: int) -> int:
        async with httpx.AsyncClient(
            base_url=target.url, timeout=60, verify=shared_tls_context()
        ) as client:  # its own connection
            response = await client.get(
                "/api/v1/system", auth=("admin", f"parallel-{attempt}"), headers=_from("203.0.113.11")
            )
            return response.status_code

    async def every() -> list[int]:
        return list(await asyncio.gather(*(guess(attempt) for attempt in range(PARALLEL_GUESSES))))

    checks_before = _login_checks(target)
    started = time.monotonic()
    statuses = asyncio.run(every())
    elapsed_s = time.monotonic() - started
    checks = _login_checks(target) - checks_before
    assert set(statuses) == {401, 429}
    # Each 401 is one scrypt run; before the counted-first throttle: 30 of 150 guesses.
    assert checks == statuses.count(401)
    assert checks <= 5 + 1 + math.floor(math.log2(1 + elapsed_s)), (checks, elapsed_s)
