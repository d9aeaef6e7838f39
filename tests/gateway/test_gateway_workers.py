"""Gateway workers in a real ``modelyard serve``: what must hold across processes.

One server with two gateway workers and the engine double deployed, shared by the module.
Fresh connections are spread over the workers by the kernel (``SO_REUSEPORT``), so a burst of
them reaches both; the server's ``/metrics`` counts requests per worker, which shows it.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .served import ServedPlatform

DEPLOYMENT = "double"


@pytest.fixture(scope="module")
def platform(served_platform: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> ServedPlatform:
    served_platform.deploy_double(DEPLOYMENT, tmp_path_factory.mktemp("double"))
    return served_platform


def fresh_request(platform: ServedPlatform, key: str, path: str = "/v1/models") -> int:
    """One request on a new connection (the kernel picks the worker per connection)."""
    with httpx.Client(timeout=30, verify=shared_tls_context()) as client:
        return client.get(platform.url + path, headers={"Authorization": f"Bearer {key}"}).status_code


def stream_once(platform: ServedPlatform, key: str) -> bytes:
    body = {"model": DEPLOYMENT, "messages": [{"role": "user", "content": "one two"}], "stream": True}
    with httpx.Client(timeout=30, verify=shared_tls_context()) as client:
        response = client.post(
            platform.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    assert response.status_code == 200, response.text
    return response.content


def worker_requests(platform: ServedPlatform) -> dict[str, float]:
    prefix = "modelyard_gateway_worker_requests_total"
    lines = [line for line in platform.metrics().splitlines() if line.startswith(prefix)]
    return {line.split('worker="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


def test_the_rest_api_is_relayed_and_both_workers_serve(platform: ServedPlatform) -> None:
    assert len(platform.worker_pids()) == 2
    system = platform.api("GET", "/api/v1/system")
    assert system.status_code == 200 and "version" in system.json()
    key = platform.create_key("both-workers")
    before = worker_requests(platform)
    assert {fresh_request(platform, key) for _ in range(24)} == {200}
    after = before
    deadline = time.monotonic() + 5  # workers report their counts every second
    while time.monotonic() < deadline:
        after = worker_requests(platform)
        if sum(after.values()) - sum(before.values()) >= 24:
            break
        time.sleep(0.1)
    served = {worker: after[worker] - before.get(worker, 0) for worker in after}
    assert set(served) == {"0", "1"} and all(count > 0 for count in served.values()), served


def test_a_revoked_key_is_refused_by_every_worker_within_a_second(platform: ServedPlatform) -> None:
    key = platform.create_key("to-revoke")
    # Every worker has the key in its cache now.
    assert {fresh_request(platform, key) for _ in range(24)} == {200}
    revoked = platform.api("DELETE", "/api/v1/keys/to-revoke")
    assert revoked.status_code == 200
    revoked_at = time.monotonic()
    statuses: list[int] = []
    while time.monotonic() - revoked_at < 1.0:
        statuses = [fresh_request(platform, key) for _ in range(24)]
        if set(statuses) == {401}:
            break
    assert set(statuses) == {401}, f"still accepted 1 s after the revocation: {statuses}"


def test_every_answered_request_is_recorded_exactly_once(platform: ServedPlatform) -> None:
    key = platform.create_key("counted")

    def requests_recorded() -> int:
        rows = platform.api("GET", "/api/v1/usage").json()["rows"]
        return sum(row["requests"] for row in rows if row["key"] == "counted")

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 10
        while requests_recorded() < count and time.monotonic() < deadline:
            time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        bodies = list(pool.map(lambda _: stream_once(platform, key), range(40)))
    assert all(body.endswith(b"data: [DONE]\n\n") for body in bodies)
    wait_for(40)
    # One more request, recorded after every earlier one was: a duplicate would show by then.
    stream_once(platform, key)
    wait_for(41)
    assert requests_recorded() == 41


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(platform: ServedPlatform) -> None:
    key = platform.create_key("survivor")
    before = platform.worker_pids()
    os.kill(before[0], signal.SIGKILL)
    # Connections the kernel hands to the dead worker's socket wait in its backlog for the new one.
    assert {fresh_request(platform, key) for _ in range(16)} == {200}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        after = platform.worker_pids()
        if len(after) == 2 and before[0] not in after:
            break
        time.sleep(0.1)
    assert len(after) == 2 and before[0] not in after and before[1] in after
    assert f"gateway worker {0} exited (signal 9); restarting it" in platform.log_tail()


def test_the_rows_of_a_worker_killed_right_after_answering_are_recorded_once(
    platform: ServedPlatform,
) -> None:
    # Rows wait up to 100 ms in a worker before they are sent: killed within that, its rows are
    # only in its journal, which the main process replays before restarting it.
    key = platform.create_key("killed-mid-batch")

    def requests_recorded() -> int:
        rows = platform.api("GET", "/api/v1/usage").json()["rows"]
        return sum(row["requests"] for row in rows if row["key"] == "killed-mid-batch")

    before = platform.worker_pids()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        bodies = list(pool.map(lambda _: stream_once(platform, key), range(24)))
    os.kill(before[0], signal.SIGKILL)
    assert all(body.endswith(b"data: [DONE]\n\n") for body in bodies)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (len(platform.worker_pids()) != 2 or requests_recorded() < 24):
        time.sleep(0.1)
    stream_once(platform, key)  # recorded after the replay: a duplicate would show by then
    while time.monotonic() < deadline and requests_recorded() < 25:
        time.sleep(0.05)
    assert requests_recorded() == 25


def test_a_new_replica_reaches_every_worker(platform: ServedPlatform, tmp_path: Path) -> None:
    key = platform.create_key("scaler")
    scaled = platform.api("PATCH", f"/api/v1/deployments/{DEPLOYMENT}", json={"replicas": 2})
    assert scaled.status_code == 200, scaled.text
    running = platform.wait_running(DEPLOYMENT, 2)
    ports = [instance["port"] for instance in running]

    def served_by(port: int) -> float:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, verify=shared_tls_context()).text
        lines = [line for line in text.splitlines() if line.startswith("vllm:request_success_total")]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    before = {port: served_by(port) for port in ports}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: stream_once(platform, key), range(16)))
    after = {port: served_by(port) for port in ports}
    assert all(after[port] > before[port] for port in ports), (before, after)


def fresh_chat(platform: ServedPlatform, key: str, deployment: str) -> str:
    """One answer on a new connection: its status and, for an error, the gateway's code."""
    body = {"model": deployment, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(timeout=30, verify=shared_tls_context()) as client:
        response = client.post(
            platform.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    return (
        "200" if response.status_code == 200 else f"{response.status_code} {response.json()['error']['code']}"
    )


def every_worker_answers(platform: ServedPlatform, key: str, deployment: str, expected: str) -> list[str]:
    """24 fresh connections (both workers, whp) until all answer ``expected``, for at most 1 s."""
    started = time.monotonic()
    answers = [fresh_chat(platform, key, deployment) for _ in range(24)]
    while set(answers) != {expected} and time.monotonic() - started < 1.0:
        answers = [fresh_chat(platform, key, deployment) for _ in range(24)]
    return answers


def test_a_new_and_a_deleted_deployment_reach_every_worker_within_a_second(
    platform: ServedPlatform, tmp_path: Path
) -> None:
    # A worker that missed the controller's snapshot would answer 404 for the new deployment,
    # and keep sending requests to the deleted one's engine.
    key = platform.create_key("pushed")
    platform.deploy_double("pushed-late", tmp_path)
    answers = every_worker_answers(platform, key, "pushed-late", "200")
    assert set(answers) == {"200"}, f"1 s after the deployment ran: {answers}"
    assert platform.api("DELETE", "/api/v1/deployments/pushed-late").status_code == 202
    deadline = time.monotonic() + 60
    while platform.api("GET", "/api/v1/deployments/pushed-late").status_code != 404:
        assert time.monotonic() < deadline, "the deployment was not deleted within 60 s"
        time.sleep(0.1)
    answers = every_worker_answers(platform, key, "pushed-late", "404 model_not_found")
    assert set(answers) == {"404 model_not_found"}, f"1 s after the deletion: {answers}"


def engine_requests(port: int) -> float:
    """Requests an engine double answered, from its own /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, verify=shared_tls_context()).text
    lines = [line for line in text.splitlines() if line.startswith("vllm:request_success_total")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_prefix_routing_set_through_the_api_holds_in_every_worker(
    platform: ServedPlatform, tmp_path: Path
) -> None:
    key = platform.create_key("prefixed")
    platform.deploy_double("prefixed", tmp_path, replicas=2)
    ports = [instance["port"] for instance in platform.wait_running("prefixed", 2)]
    conversation = "You are a careful assistant. " * 60

    def spread_of(content: str, count: int) -> list[float]:
        before = [engine_requests(port) for port in ports]
        body = {"model": "prefixed", "messages": [{"role": "user", "content": content}], "max_tokens": 2}
        for _ in range(count):  # fresh connections: both workers
            with httpx.Client(timeout=30, verify=shared_tls_context()) as client:
                answer = client.post(
                    platform.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert answer.status_code == 200, answer.text
        return sorted(engine_requests(port) - start for port, start in zip(ports, before, strict=True))

    refused = platform.api("PATCH", "/api/v1/deployments/prefixed", json={"routing": "hash"})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "body field 'routing': Input should be 'least-outstanding' or 'prefix'"
    )
    assert min(spread_of(conversation, 12)) > 0  # least outstanding: both replicas
    switched = platform.api("PATCH", "/api/v1/deployments/prefixed", json={"routing": "prefix"})
    assert switched.status_code == 200 and switched.json()["routing"] == "prefix"
    # Every worker ranks the replicas alike: one conversation, one replica, whichever worker.
    started = time.monotonic()
    spread = spread_of(conversation, 12)
    while spread != [0, 12] and time.monotonic() - started < 1.0:
        spread = spread_of(conversation, 12)
    assert spread == [0, 12], f"1 s after the switch: {spread}"


def test_a_console_session_cookie_never_rides_on_another_clients_request(platform: ServedPlatform) -> None:
    # The relay to the main process is one HTTP client for every visitor: a cookie jar there
    # would hand one visitor's session to the next.
    with httpx.Client(base_url=platform.url, timeout=30, verify=shared_tls_context()) as visitor:
        form = visitor.get("/login")
        token = form.text.split('name="login_token" value="')[1].split('"')[0]
        signed_in = visitor.post("/login", data={"password": platform.password, "login_token": token})
        assert signed_in.status_code == 303 and "modelyard_session" in visitor.cookies
        assert visitor.get("/api/v1/system").status_code == 200
    for _ in range(8):  # on fresh connections, through both workers
        with httpx.Client(base_url=platform.url, timeout=30, verify=shared_tls_context()) as stranger:
            assert stranger.get("/api/v1/system").status_code == 401
