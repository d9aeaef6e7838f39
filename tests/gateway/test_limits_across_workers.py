"""Limits per key and per deployment in a real ``modelyard serve --gateway-workers 2``.

Each request goes on a fresh connection, so the kernel spreads them over both workers
(``SO_REUSEPORT``); a limit that each worker kept on its own would let through up to twice as
many. The engine double answers; a slow deployment of it keeps requests in flight. The last
test restarts the server (the platform is shared: it comes back with the same deployments).
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from typing import Any

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .served import ServedPlatform

FAST = "limits-fast"
SLOW = "limits-slow"
WORKERS = 2


@pytest.fixture(scope="module")
def platform(served_platform: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> ServedPlatform:
    scratch = tmp_path_factory.mktemp("limits")
    served_platform.deploy_double(FAST, scratch)
    # 8 tokens 600 ms apart after a 1 s first token: a stream is in flight for about 5 s.
    served_platform.deploy_double(SLOW, scratch, ttft_ms=1000, itl_ms=600)
    return served_platform


def limited_key(platform: ServedPlatform, name: str, **limits: Any) -> str:
    response = platform.api("POST", "/api/v1/keys", json={"name": name, **limits})
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def chat(model: str) -> dict[str, Any]:
    # max_tokens covers the double's 8 tokens, so a reservation is never below what is used.
    return {"model": model, "messages": [{"role": "user", "content": "one two"}], "max_tokens": 8}


def fresh_post(platform: ServedPlatform, key: str, model: str = FAST) -> httpx.Response:
    """One chat request on a new connection (the kernel picks the worker per connection)."""
    with httpx.Client(timeout=60, verify=shared_tls_context()) as client:
        return client.post(
            platform.url + "/v1/chat/completions",
            json=chat(model),
            headers={"Authorization": f"Bearer {key}"},
        )


def burst(platform: ServedPlatform, key: str, count: int, model: str = FAST) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(lambda _: fresh_post(platform, key, model), range(count)))


def window_slack(limit: int, started_s: float, ended_s: float) -> int:
    """Admissions the sliding minute may add while a burst runs: none within one minute; past a
    minute's end the previous minute's count fades by ``limit / 60`` a second."""
    boundary_s = (ended_s // 60) * 60
    return 0 if started_s >= boundary_s else math.ceil(limit * (ended_s - boundary_s) / 60)


def timed_burst(
    platform: ServedPlatform, key: str, count: int, limit: int, model: str = FAST
) -> tuple[list[httpx.Response], int]:
    """The burst's answers, and the most admissions a limit of ``limit`` may allow beyond itself
    during it: ``workers - 1`` decided at the same instant, plus the window's slack."""
    started_s = time.time()
    responses = burst(platform, key, count, model)
    return responses, WORKERS - 1 + window_slack(limit, started_s, time.time())


def limit_message(response: httpx.Response) -> str:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    return str(error["message"])


def worker_requests(platform: ServedPlatform) -> dict[str, float]:
    prefix = "modelyard_gateway_worker_requests_total"
    lines = [line for line in platform.metrics().splitlines() if line.startswith(prefix)]
    return {line.split('worker="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


def wait_for_worker_counts(
    platform: ServedPlatform, before: dict[str, float], total: int
) -> dict[str, float]:
    """Requests per worker since ``before``, once ``total`` have been reported (every second)."""
    deadline = time.monotonic() + 5
    served: dict[str, float] = {}
    while time.monotonic() < deadline:
        after = worker_requests(platform)
        served = {worker: after[worker] - before.get(worker, 0) for worker in after}
        if sum(served.values()) >= total:
            break
        time.sleep(0.1)
    return served


def key_tokens(platform: ServedPlatform, name: str) -> int:
    rows = platform.api("GET", "/api/v1/usage").json()["rows"]
    return sum(int(row["total_tokens"]) for row in rows if row["key"] == name)


def test_a_keys_requests_per_minute_hold_for_both_workers_together(platform: ServedPlatform) -> None:
    limit = 10
    key = limited_key(platform, "rpm-both", requests_per_minute=limit)
    before = worker_requests(platform)
    responses, beyond = timed_burst(platform, key, 3 * limit, limit)
    answered = sum(response.status_code == 200 for response in responses)
    refused = [response for response in responses if response.status_code != 200]
    # Each worker on its own would have answered up to 2 x 10.
    assert limit <= answered <= limit + beyond, [response.status_code for response in responses]
    assert all("requests per minute: limit 10" in limit_message(response) for response in refused)
    served = wait_for_worker_counts(platform, before, 3 * limit)
    assert set(served) == {"0", "1"} and all(count > 0 for count in served.values()), served
    assert fresh_post(platform, key).status_code == 429


def test_a_keys_concurrent_requests_hold_for_both_workers_together(platform: ServedPlatform) -> None:
    key = limited_key(platform, "concurrent-both", max_concurrent_requests=2)
    streaming = threading.Barrier(3, timeout=60)
    statuses: list[int] = []
    ended_s: list[float] = []

    def slow_stream() -> None:
        body = {**chat(SLOW), "stream": True}
        with (
            httpx.Client(timeout=60, verify=shared_tls_context()) as client,
            client.stream(
                "POST",
                platform.url + "/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
            ) as response,
        ):
            statuses.append(response.status_code)
            chunks = response.iter_bytes()
            next(chunks)  # the first token: the request is running
            streaming.wait()
            for _ in chunks:
                pass
        ended_s.append(time.monotonic())

    threads = [threading.Thread(target=slow_stream) for _ in range(2)]
    for thread in threads:
        thread.start()
    streaming.wait()
    # Two running (through one worker or both): every probe, through either worker, is refused.
    probes = burst(platform, key, 8)
    probed_s = time.monotonic()
    for thread in threads:
        thread.join(timeout=60)
    after = fresh_post(platform, key)
    assert statuses == [200, 200]
    assert probed_s < min(ended_s), "the probes took longer than the streams: the test proves nothing"
    assert all("2 of 2 requests of this key are running" in limit_message(probe) for probe in probes)
    assert after.status_code == 200, after.text


def test_a_spent_quota_is_refused_by_every_worker(platform: ServedPlatform) -> None:
    quota = 3000
    key = limited_key(platform, "quota-both", token_quota=quota, quota_period="day")
    # Both workers see the key first with nothing used (each reads usage_records then).
    warm = burst(platform, key, 12)
    assert {response.status_code for response in warm} == {200}
    # Spend the rest through one connection, so through one worker.
    spent = 0
    with httpx.Client(
        timeout=60, headers={"Authorization": f"Bearer {key}"}, verify=shared_tls_context()
    ) as client:
        while (
            answer := client.post(platform.url + "/v1/chat/completions", json=chat(FAST))
        ).status_code == 200:
            spent += 1
            assert spent < 500, "the quota never ran out"
    assert "token quota reached" in limit_message(answer)
    # The other worker learns it from the main process within a usage batch.
    deadline = time.monotonic() + 5
    late_answers = 0
    while True:
        statuses = [response.status_code for response in burst(platform, key, 12)]
        late_answers += statuses.count(200)
        if set(statuses) == {429} or time.monotonic() > deadline:
            break
    assert set(statuses) == {429}, f"still answered after the quota ran out: {statuses}"
    deadline = time.monotonic() + 5
    while key_tokens(platform, "quota-both") < quota - 40 and time.monotonic() < deadline:
        time.sleep(0.1)
    used = key_tokens(platform, "quota-both")
    # Stopped within one request's reservation of the quota; beyond it only by what the other
    # worker answered before it heard.
    per_request = int(warm[0].json()["usage"]["total_tokens"])
    assert quota - 60 <= used <= quota + per_request * late_answers, (used, per_request, late_answers)


def test_a_deployments_limits_hold_for_every_key_and_both_workers(platform: ServedPlatform) -> None:
    changed = platform.api(
        "PATCH", f"/api/v1/deployments/{FAST}", json={"limits": {"requests_per_minute": 6}}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["limits"] == {
        "requests_per_minute": 6,
        "tokens_per_minute": None,
        "max_concurrent_requests": None,
    }
    keys = [limited_key(platform, f"deployment-limited-{index}") for index in range(3)]
    started_s = time.time()  # counting starts here: the window's slack is measured from it
    deadline = time.monotonic() + 5  # the limits reach the workers with the endpoint snapshot
    while fresh_post(platform, keys[0]).status_code == 200 and time.monotonic() < deadline:
        pass
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(lambda index: fresh_post(platform, keys[index % 3]), range(12)))
    beyond = WORKERS - 1 + window_slack(6, started_s, time.time())
    refused = [response for response in responses if response.status_code != 200]
    assert len(refused) >= 12 - beyond, [response.status_code for response in responses]
    message = limit_message(refused[0])
    assert f"rate limit of deployment '{FAST}' reached for requests per minute: limit 6" in message
    # Another deployment is not touched.
    assert fresh_post(platform, keys[0], SLOW).status_code == 200
    cleared = platform.api("PATCH", f"/api/v1/deployments/{FAST}", json={"limits": {}})
    assert cleared.status_code == 200 and cleared.json()["limits"]["requests_per_minute"] is None


def test_quotas_and_deployment_limits_hold_across_a_server_restart(platform: ServedPlatform) -> None:
    spent_key = limited_key(platform, "quota-restart", token_quota=100, quota_period="month")
    with httpx.Client(
        timeout=60, headers={"Authorization": f"Bearer {spent_key}"}, verify=shared_tls_context()
    ) as client:
        while client.post(platform.url + "/v1/chat/completions", json=chat(FAST)).status_code == 200:
            pass
    limited = platform.api(
        "PATCH", f"/api/v1/deployments/{FAST}", json={"limits": {"requests_per_minute": 6}}
    )
    assert limited.status_code == 200, limited.text
    platform.stop()
    platform.start()
    platform.wait_running(FAST, 1)
    platform.wait_running(SLOW, 1)
    # The quota comes back from usage_records on every worker.
    refusals = burst(platform, spent_key, 8)
    assert all("token quota reached" in limit_message(response) for response in refusals)
    # The deployment's limit comes back from its row; the per-minute counts start again (documented).
    assert platform.api("GET", f"/api/v1/deployments/{FAST}").json()["limits"]["requests_per_minute"] == 6
    other = limited_key(platform, "after-restart")
    responses, beyond = timed_burst(platform, other, 12, 6)
    answered = sum(response.status_code == 200 for response in responses)
    assert 6 <= answered <= 6 + beyond, [response.status_code for response in responses]
    cleared = platform.api("PATCH", f"/api/v1/deployments/{FAST}", json={"limits": {}})
    assert cleared.status_code == 200 and cleared.json()["limits"]["requests_per_minute"] is None
