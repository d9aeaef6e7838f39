"""Console sessions on a real ``modelyard serve`` with two gateway workers: one session is good on
every connection whichever worker takes it, survives a restart of the server, and ends for
every worker at once when revoked or signed out; guessed passwords sent at once through both
workers run only the throttle's allowance of password checks.

Fresh connections (one client each) are spread by the kernel over the workers' sockets. The
guesses seem to come from a documentation address (``X-Forwarded-For``, trusted from loopback).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.served import ServedPlatform
from modelyard.testing.http_clients import shared_tls_context

CONNECTIONS = 24
ALLOWANCE = 5  # FailureThrottle.free_failures


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    served = ServedPlatform(tmp_path_factory.mktemp("sessions") / "data", gateway_workers=2)
    served.start()
    try:
        yield served
    finally:
        served.stop()


def _login_token(client: httpx.Client) -> str:
    page = client.get("/login").text
    return page.split('name="login_token" value="', 1)[1].split('"', 1)[0]


def _signed_in(platform: ServedPlatform) -> tuple[str, str]:
    """(session cookie, CSRF token) of a fresh password sign-in."""
    with httpx.Client(base_url=platform.url, timeout=60, verify=shared_tls_context()) as browser:
        answer = browser.post(
            "/login",
            data={"login_token": _login_token(browser), "username": "admin", "password": platform.password},
        )
        assert answer.status_code == 303, answer.text
        page = browser.get("/account").text
        cookie = browser.cookies["modelyard_session"]
    return cookie, page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


def _statuses(platform: ServedPlatform, cookie: str, count: int = CONNECTIONS) -> list[int]:
    async def one() -> int:
        async with httpx.AsyncClient(
            base_url=platform.url, timeout=60, verify=shared_tls_context()
        ) as client:  # its own connection
            client.cookies.set("modelyard_session", cookie)
            return (await client.get("/api/v1/system")).status_code

    async def every() -> list[int]:
        return list(await asyncio.gather(*(one() for _ in range(count))))

    return asyncio.run(every())


def test_one_session_is_good_on_every_connection(platform: ServedPlatform) -> None:
    cookie, _ = _signed_in(platform)
    assert _statuses(platform, cookie) == [200] * CONNECTIONS


def test_a_session_survives_a_restart_of_the_server(platform: ServedPlatform) -> None:
    cookie, _ = _signed_in(platform)
    platform.stop()
    platform.start()
    assert _statuses(platform, cookie) == [200] * CONNECTIONS


def test_a_revoked_session_is_refused_on_every_connection_and_the_others_stay(
    platform: ServedPlatform,
) -> None:
    revoked, _ = _signed_in(platform)
    kept, _ = _signed_in(platform)
    listed = platform.api("GET", "/api/v1/sessions").json()
    newest_first = [session["id"] for session in listed]
    assert platform.api("DELETE", f"/api/v1/sessions/{newest_first[1]}").status_code == 204
    assert _statuses(platform, revoked) == [401] * CONNECTIONS
    assert _statuses(platform, kept) == [200] * CONNECTIONS


def test_sign_out_deletes_the_session(platform: ServedPlatform) -> None:
    cookie, csrf = _signed_in(platform)
    with httpx.Client(base_url=platform.url, timeout=60, verify=shared_tls_context()) as browser:
        browser.cookies.set("modelyard_session", cookie)
        assert browser.post("/logout", data={"csrf_token": csrf}).status_code == 303
    assert _statuses(platform, cookie, 4) == [401] * 4


def test_revoking_every_session_of_a_user_ends_them_all(platform: ServedPlatform) -> None:
    cookies = [_signed_in(platform)[0] for _ in range(3)]
    answer = platform.api("DELETE", "/api/v1/sessions", params={"username": "admin"})
    assert answer.status_code == 200 and answer.json()["revoked"] >= 3
    for cookie in cookies:
        assert _statuses(platform, cookie, 4) == [401] * 4


def _login_checks(platform: ServedPlatform) -> float:
    prefix = 'modelyard_auth_throttle_attempts_total{outcome="admitted",throttle="login"}'
    lines = [line for line in platform.metrics().splitlines() if line.startswith(prefix)]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def test_wrong_passwords_sent_at_once_through_both_workers_run_only_the_allowance(
    platform: ServedPlatform,
) -> None:
    with httpx.Client(base_url=platform.url, timeout=60, verify=shared_tls_context()) as browser:
        token = _login_token(browser)

    async def guess(attempt: int) -> int:
        async with httpx.AsyncClient(
            base_url=platform.url, timeout=120, verify=shared_tls_context()
        ) as client:  # its own connection
            client.cookies.set("modelyard_login", token, path="/login")
            answer = await client.post(
                "/login",
                data={"login_token": token, "username": "admin", "password": f"guess-{attempt}"},
                headers={"X-Forwarded-For": "203.0.113.60"},
            )
            return answer.status_code

    async def every() -> list[int]:
        return list(await asyncio.gather(*(guess(attempt) for attempt in range(150))))

    checks_before = _login_checks(platform)
    started = time.monotonic()
    statuses = asyncio.run(every())
    elapsed_s = time.monotonic() - started
    checks = _login_checks(platform) - checks_before
    assert set(statuses) == {401, 429}, statuses
    # Each 401 is one scrypt run; each further try waits (1, 2, 4 s ...), so a few more may pass.
    assert checks == statuses.count(401)
    assert statuses.count(401) <= ALLOWANCE + 1 + math.floor(math.log2(1 + elapsed_s)), (statuses, elapsed_s)
    print(f"150 wrong passwords at once, 2 workers: {checks:.0f} checked, {statuses.count(429)} refused")
