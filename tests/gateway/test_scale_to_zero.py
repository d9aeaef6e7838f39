"""Scale to zero through a real ``modelyard serve`` with two gateway workers and the engine double
(the reference server playing vLLM, real processes started by the controller).

What crosses processes is what is tested: the idle time read from the workers' counts, the
request held in a worker while the main process's autoscaler starts a replica (``ReplicaWanted``
over the control channel), the held count summed over the workers (the shared counters), the
hold released by the endpoint snapshot. The server is another process, so the test polls its API
(as ``modelyard ps`` would) where it waits for the autoscaler.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .served import ServedPlatform

SCALES_TO_ZERO: dict[str, Any] = {
    "min": 0,
    "max": 1,
    "target": {"metric": "waiting_per_replica", "value": 1},
    "stabilisation_s": 0,
    "cooldown_s": 0,
    "idle_s": 1,
}


def chat(platform: ServedPlatform, key: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "wake up"}], "max_tokens": 4}
    with httpx.Client(timeout=60, verify=shared_tls_context()) as client:
        return client.post(
            platform.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )


def autoscale_of(platform: ServedPlatform, name: str) -> dict[str, Any]:
    response = platform.api("GET", f"/api/v1/deployments/{name}/autoscale")
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


def wait_until(what: str, condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def scaled_to_zero(platform: ServedPlatform, name: str) -> bool:
    deployment = platform.api("GET", f"/api/v1/deployments/{name}").json()
    return bool(deployment["state"] == "scaled to zero" and not deployment["instances"])


def deploy_scaling_to_zero(
    platform: ServedPlatform, name: str, scratch: Path, extra: str = "", **autoscale: Any
) -> None:
    platform.deploy_double(name, scratch, extra=extra)
    response = platform.api(
        "PATCH", f"/api/v1/deployments/{name}", json={"autoscale": {**SCALES_TO_ZERO, **autoscale}}
    )
    assert response.status_code == 200, response.text
    wait_until(f"{name} scaled to zero", lambda: scaled_to_zero(platform, name))


def test_idle_scales_to_zero_and_a_held_request_is_answered_once_a_replica_runs(
    served_platform: ServedPlatform, tmp_path: Path
) -> None:
    platform = served_platform
    deploy_scaling_to_zero(platform, "sleepy", tmp_path)
    [down] = autoscale_of(platform, "sleepy")["events"]
    assert (down["direction"], down["from_replicas"], down["to_replicas"]) == ("down", 1, 0)
    assert down["reason"].endswith("(idle_s 1): 1 → 0, scaled to zero"), down["reason"]

    key = platform.create_key("wakes-sleepy")
    started = time.monotonic()
    answer = chat(platform, key, "sleepy")
    waited_s = time.monotonic() - started
    print(f"\nheld request's wait on scale from zero (engine double): {waited_s:.2f} s")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    up = autoscale_of(platform, "sleepy")["events"][1]
    assert (up["direction"], up["from_replicas"], up["to_replicas"]) == ("up", 0, 1)
    assert up["reason"].endswith("request(s) held at the gateway while scaled to zero: 0 → 1"), up["reason"]


def test_each_decision_is_an_event_of_the_deployment_and_an_audit_row_of_the_autoscaler(
    served_platform: ServedPlatform, tmp_path: Path
) -> None:
    platform = served_platform
    deploy_scaling_to_zero(platform, "noted", tmp_path)
    # Woken, it stays up for the checks below (idle_s 1 would scale it to zero again at once).
    staying = {**SCALES_TO_ZERO, "idle_s": 3600}
    assert platform.api("PATCH", "/api/v1/deployments/noted", json={"autoscale": staying}).status_code == 200
    key = platform.create_key("wakes-noted")
    assert chat(platform, key, "noted").status_code == 200
    platform.wait_running("noted", 1)  # its transition to running is written
    events = platform.api("GET", "/api/v1/deployments/noted/events").json()
    decisions = [event for event in events if event["kind"] == "autoscale"]
    assert [(e["direction"], e["from_replicas"], e["to_replicas"]) for e in decisions] == [
        ("down", 1, 0),
        ("up", 0, 1),
    ]
    assert decisions[0]["reason"].endswith("(idle_s 1): 1 → 0, scaled to zero")
    assert decisions[1]["reason"] == "1 request(s) held at the gateway while scaled to zero: 0 → 1"
    # In time order with the instances' transitions: the first replica stops after the decision
    # to scale to zero, the new one starts after the wake.
    kinds = [(e["kind"], e["to_state"]) for e in events]
    woken = kinds.index(("autoscale", None), kinds.index(("autoscale", None)) + 1)
    assert ("instance", "stopped") in kinds[kinds.index(("autoscale", None)) : woken]
    assert ("instance", "starting") in kinds[woken:] and ("instance", "running") in kinds[woken:]

    shown = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "ps", "noted"],
        env={**os.environ, "MODELYARD_URL": platform.url, "MODELYARD_PASSWORD": platform.password,
             "COLUMNS": "200", "NO_COLOR": "1"},
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "autoscaler" in shown and "0 → 1" in shown and "scaled to zero" in shown, shown

    audit = platform.api("GET", "/api/v1/audit", params={"object_name": "noted"}).json()["events"]
    by_autoscaler = [
        (e["action"], e["details"]["from_replicas"], e["details"]["replicas"])
        for e in audit
        if e["actor"] == "autoscaler"
    ]
    assert by_autoscaler == [("scale", 0, 1), ("scale", 1, 0)]  # newest first
    patched, _staying = [e for e in audit if e["actor"] == "admin" and e["action"] == "update"][::-1]
    assert patched["details"]["autoscale"]["min"] == 0 and patched["details"]["autoscale"]["idle_s"] == 1
    assert patched["project"] == "default"


def test_past_the_hold_bounds_requests_get_503_with_retry_after(
    served_platform: ServedPlatform, tmp_path: Path
) -> None:
    platform = served_platform
    # The double takes 6 s to load: longer than the 2 s a request may be held.
    deploy_scaling_to_zero(
        platform, "slow-waker", tmp_path, extra="--startup-delay-s 6", max_hold_s=2, max_held_requests=1
    )
    key = platform.create_key("wakes-slow-waker")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(chat, platform, key, "slow-waker")
        # Held (and counted) before it asks for a replica: once the wake is recorded, it is held.
        wait_until("the wake", lambda: len(autoscale_of(platform, "slow-waker")["events"]) == 2)
        second = chat(platform, key, "slow-waker")  # on either worker: the count is shared
        held_too_long = first.result()
    bounds = ((second, "autoscale.max_held_requests 1"), (held_too_long, "autoscale.max_hold_s"))
    for response, bound in bounds:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        error = response.json()["error"]
        assert error["code"] == "scaled_to_zero" and error["type"] == "server_error"
        assert "is scaled to zero and starting a replica" in error["message"]
        assert bound in error["message"], error["message"]


def held_requests(platform: ServedPlatform, name: str) -> float:
    prefix = f'modelyard_autoscale_held_requests{{deployment="{name}"}} '
    [line] = [line for line in platform.metrics().splitlines() if line.startswith(prefix)]
    return float(line.rsplit(" ", 1)[1])


def test_a_client_that_leaves_while_held_gives_its_place_back(
    served_platform: ServedPlatform, tmp_path: Path
) -> None:
    platform = served_platform
    deploy_scaling_to_zero(
        platform, "leaver", tmp_path, extra="--startup-delay-s 6", max_hold_s=60, max_held_requests=1
    )
    key = platform.create_key("leaves-while-held")
    body = {"model": "leaver", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    with (
        pytest.raises(httpx.ReadTimeout),
        httpx.Client(timeout=1.0, verify=shared_tls_context()) as impatient,
    ):
        impatient.post(
            platform.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    wait_until("the held place given back", lambda: held_requests(platform, "leaver") == 0)
    # Its place is free: the next request is held (not refused as one too many) and answered.
    answer = chat(platform, key, "leaver")
    assert answer.status_code == 200, answer.text


def test_a_removed_deployment_is_not_woken(served_platform: ServedPlatform, tmp_path: Path) -> None:
    platform = served_platform
    deploy_scaling_to_zero(platform, "removed", tmp_path)
    response = platform.api("DELETE", "/api/v1/deployments/removed")
    assert response.status_code == 202, response.text
    wait_until(
        "the deployment gone",
        lambda: platform.api("GET", "/api/v1/deployments/removed").status_code == 404,
    )
    key = platform.create_key("wakes-removed")
    answer = chat(platform, key, "removed")
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "model_not_found"


@pytest.fixture(autouse=True)
def _deployments_removed_after(served_platform: ServedPlatform) -> Any:
    yield
    for name in ("sleepy", "noted", "slow-waker", "leaver"):
        served_platform.api("DELETE", f"/api/v1/deployments/{name}")
