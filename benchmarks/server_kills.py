"""Server SIGKILLs against a real ``modelyard serve``: orphans, and time out of rotation.

Two measurements, on the project's engine double (playing vLLM) run by the process runtime:

1. **The kill series**: N times, create a deployment, SIGKILL the server 0-200 ms later (spread
   evenly), start it again. Then count, per deployment, the engine processes carrying this
   server's owner id (by launch token), and how each kill was resolved from the events: the
   engine was launched and re-adopted by its token, or it had not been launched yet.
2. **Out of rotation**: a running, verified deployment; SIGKILL the server; start it again.
   Reported: seconds from the new server's launch to its REST API answering, and from there to
   the first chat answered through the gateway (the re-adopted engine back in rotation), against
   the same deployment's original time from create to running (the baseline: a cold start, with
   verification skipped: the engine double cannot pass the reasoning and tool-call checks, and a
   re-adopted engine keeps its verification result rather than running it again).

    python benchmarks/server_kills.py --kills 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from modelyard.testing.serve_process import ServeProcess, wait_until
from modelyard.testing.tiny_model import build_tiny_qwen3

BACKEND_YAML = """\
backend_name: vllm-double
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{model_path}} --host {{worker_ip}} --port {{port}}
      --served-model-name {{model_name}}
    custom_framework: cpu
modelyard:
  family: custom
"""


def _state(client: httpx.Client, name: str) -> str:
    response = client.get(f"/api/v1/deployments/{name}")
    instances = response.json()["instances"] if response.status_code == 200 else []
    return str(instances[0]["state"]) if instances else ""


def _wait_running(client: httpx.Client, name: str) -> None:
    try:
        wait_until(lambda: _state(client, name) == "running", 180, f"{name} running")
    except AssertionError:
        print(client.get(f"/api/v1/deployments/{name}").json()["instances"], file=sys.stderr)
        raise


def kill_series(server: ServeProcess, kills: int) -> None:
    names = [f"kill-{index}" for index in range(kills)]
    for index, name in enumerate(names):
        with server.api() as client:
            created = client.post(
                "/api/v1/deployments",
                json={"model": "tiny", "name": name, "backend": "vllm-double", "skip_verification": True},
            )
            assert created.status_code == 201, created.text
        time.sleep(index * 0.2 / max(1, kills - 1))
        server.kill()
        server.start("--no-demo")
        server.wait_until_answering()
    with server.api() as client:
        for name in names:
            _wait_running(client, name)
        outcomes: Counter[str] = Counter()
        for name in names:
            reasons = [event["reason"] for event in client.get(f"/api/v1/deployments/{name}/events").json()]
            if any("re-adopted engine" in reason for reason in reasons):
                outcomes["launched before the kill, re-adopted by its launch token"] += 1
            elif any("gone when the server started" in reason for reason in reasons):
                outcomes["launch recorded, engine not yet running: started again"] += 1
            else:
                outcomes["not launched before the kill: started by the next server"] += 1
    engines = server.engine_tokens()
    per_replica = Counter(len(engines.get(name, set())) for name in names)
    orphans = sum(len(tokens) for name, tokens in engines.items() if name not in names)
    print(f"kill series: {kills} server SIGKILLs at 0-200 ms after a create")
    for outcome, count in outcomes.most_common():
        print(f"  {count:3d}  {outcome}")
    print(f"  engines per replica at the end: {dict(sorted(per_replica.items()))} (want {{1: {kills}}})")
    print(f"  orphaned engines at the end: {orphans}")


def out_of_rotation(server: ServeProcess, rounds: int) -> None:
    started = time.monotonic()
    with server.api() as client:
        body = {"model": "tiny", "name": "steady", "backend": "vllm-double", "skip_verification": True}
        assert client.post("/api/v1/deployments", json=body).status_code == 201
        _wait_running(client, "steady")
        cold_seconds = time.monotonic() - started
        key = client.post("/api/v1/keys", json={"name": "bench"}).json()["key"]

    def answered() -> bool:
        try:
            return (
                httpx.post(
                    f"{server.url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={
                        "model": "steady",
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 2,
                    },
                    timeout=5,
                    trust_env=False,
                ).status_code
                == 200
            )
        except httpx.HTTPError:
            return False

    to_api, to_rotation = [], []
    for _ in range(rounds):
        server.kill()
        launched = time.monotonic()
        server.start("--no-demo")
        server.wait_until_answering()
        answering = time.monotonic()
        wait_until(answered, 180, "a chat answered after the restart", interval=0.02)
        to_api.append(answering - launched)
        to_rotation.append(time.monotonic() - answering)
    print(f"out of rotation after a server SIGKILL ({rounds} rounds, median):")
    print(f"  new server launched -> REST API answering   {statistics.median(to_api):6.2f} s")
    print(f"  REST API answering  -> first chat answered  {statistics.median(to_rotation):6.2f} s")
    print(f"  baseline: create -> running (a cold start, verification skipped) {cold_seconds:6.2f} s")
    print(f"  ratio (rotation gap / cold start): {statistics.median(to_rotation) / cold_seconds:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelyard-kills-") as folder:
        root = Path(folder)
        model_dir = build_tiny_qwen3(root / "tiny")
        server = ServeProcess(data_dir=root / "data")
        server.start("--no-demo")
        server.wait_until_answering()
        try:
            with server.api() as client:
                assert client.post("/api/v1/backends/import", content=BACKEND_YAML).status_code in (200, 201)
                assert (
                    client.post("/api/v1/models", json={"path": str(model_dir), "name": "tiny"}).status_code
                    == 201
                )
            kill_series(server, arguments.kills)
            out_of_rotation(server, arguments.rounds)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
