"""How long a request waits when its deployment is scaled to zero, against starting it by hand.

Runs ``modelyard serve`` as a user would (two gateway workers, a fresh data directory), deploys
the engine double (the reference server playing vLLM, a real process per replica) with
``autoscale: {min: 0, idle_s: 1}``, and for each round:

- **held**: waits until the deployment is scaled to zero, then times one chat completion from
  the moment it is sent to its answer: the gateway holds it while the autoscaler starts a replica;
- **by hand** (the baseline, in the same run, on a second deployment without autoscale): ``POST
  .../stop``, then ``POST .../start`` and a chat completion polled every 50 ms until it answers
  200, timed from the start: what a client does without scale to zero.

The ratio held / by hand says what holding adds to (or saves on) the engine's own start; the
absolute figures are mostly the double's start on this (shared) host. With a real engine add its
load time to both.

    python benchmarks/scale_from_zero.py --rounds 5

About a minute; never run as a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from modelyard.testing.serve_process import ServeProcess, wait_until
from modelyard.testing.weightless_model import build_weightless_model

BACKEND_YAML = f"""\
backend_name: vllm-double
description: the reference server playing vLLM (the engine double)
health_check_path: /health
modelyard:
  family: vllm
version_configs:
  "1.0":
    run_command: {sys.executable} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}} \
--host {{{{worker_ip}}}} --port {{{{port}}}} --served-model-name {{{{model_name}}}} --output-tokens 4
    custom_framework: cpu
    modelyard:
      metrics_path: /metrics
"""
AUTOSCALE = {
    "min": 0,
    "max": 1,
    "target": {"metric": "waiting_per_replica", "value": 1},
    "stabilisation_s": 0,
    "cooldown_s": 0,
    "idle_s": 1,
}
BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def state_of(api: httpx.Client, name: str) -> str:
    return str(api.get(f"/api/v1/deployments/{name}").json()["state"])


def chat(client: httpx.Client, key: str, name: str) -> int:
    response = client.post(
        "/v1/chat/completions", json={"model": name, **BODY}, headers={"Authorization": f"Bearer {key}"}
    )
    return response.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="scale-from-zero-"))
    server = ServeProcess(data_dir=scratch / "data")
    server.start("--no-demo", "--host", "127.0.0.1", "--gateway-workers", "2")
    held_s: list[float] = []
    by_hand_s: list[float] = []
    try:
        server.wait_until_answering()
        with server.api() as api, httpx.Client(base_url=server.url, timeout=120, trust_env=False) as client:
            model = build_weightless_model(scratch / "model")
            assert api.post("/api/v1/models", json={"path": str(model), "name": "tiny"}).status_code in (
                200,
                201,
            )
            assert api.post("/api/v1/backends/import", content=BACKEND_YAML.encode()).status_code in (
                200,
                201,
            )
            for name, autoscale in (("sleepy", AUTOSCALE), ("by-hand", None)):
                body = {"model": "tiny", "name": name, "backend": "vllm-double", "skip_verification": True}
                response = api.post("/api/v1/deployments", json={**body, "autoscale": autoscale})
                assert response.status_code == 201, response.text
            key = api.post("/api/v1/keys", json={"name": "bench"}).json()["key"]
            for _ in range(arguments.rounds):
                wait_until(lambda: state_of(api, "sleepy") == "scaled to zero", 60, "sleepy scaled to zero")
                started = time.monotonic()
                assert chat(client, key, "sleepy") == 200
                held_s.append(time.monotonic() - started)

                wait_until(lambda: state_of(api, "by-hand") == "running", 60, "by-hand running")
                api.post("/api/v1/deployments/by-hand/stop")
                wait_until(lambda: state_of(api, "by-hand") == "stopped", 60, "by-hand stopped")
                started = time.monotonic()
                api.post("/api/v1/deployments/by-hand/start")
                while chat(client, key, "by-hand") != 200:
                    time.sleep(0.05)
                by_hand_s.append(time.monotonic() - started)
    finally:
        server.stop()
    load = os.getloadavg()[0]
    print(f"host: {os.cpu_count()} cores, load average {load:.1f}; {arguments.rounds} rounds")
    print(
        f"held request on scale from zero: median {statistics.median(held_s):.2f} s "
        f"(min {min(held_s):.2f}, max {max(held_s):.2f})"
    )
    print(
        f"start by hand, polled to the first answer: median {statistics.median(by_hand_s):.2f} s "
        f"(min {min(by_hand_s):.2f}, max {max(by_hand_s):.2f})"
    )
    print(f"ratio held / by hand: {statistics.median(held_s) / statistics.median(by_hand_s):.2f}")


if __name__ == "__main__":
    main()
