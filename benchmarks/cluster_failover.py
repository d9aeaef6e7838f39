"""How long a host takes to join a cluster, and a replica to run again after its host died.

Runs a cluster as a user would (``modelyard.testing.cluster_process``): ``modelyard serve
--cluster`` (its own Ray head; this host offers no GPU), two hosts joined with ``modelyard worker
join`` (two more raylets on this host, 1 GPU each from the NVML double), the engine double as
the engine. Times, from the moment each command is started:

- **join**: ``worker join`` started -> the host ``ready`` with its GPUs in ``GET /api/v1/workers``;
- **cold start** (the baseline, in the same run): ``POST /api/v1/deployments`` -> the replica
  ``running`` on a healthy cluster;
- **failover**: the replica's host SIGKILLed (the join, its ``ray start`` and the node's
  processes) -> the host ``lost`` -> the replica ``running`` on the other host. The ratio
  failover / cold start says what the loss costs beyond a start.

``--ray-defaults`` keeps Ray's own health checks (a check every 3 s, 5 misses); without it the
head checks every 0.5 s and gives up after 3 misses, as the tests do. The load average is
printed (this machine may be shared).

    python benchmarks/cluster_failover.py
    python benchmarks/cluster_failover.py --ray-defaults --json /tmp/failover.json

Takes one to two minutes; never run as a test. Needs the ray extra.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from modelyard.testing.cluster_process import (
    ENGINE_DOUBLE_BACKEND_YAML,
    JoinedCluster,
    nvml_gpu,
    start_cluster,
    with_group_killed,
)
from modelyard.testing.serve_process import wait_until
from modelyard.testing.tiny_model import build_tiny_qwen3

WAIT_SECONDS = 180.0


def _replica(cluster: JoinedCluster, name: str) -> dict[str, Any] | None:
    with cluster.server.api() as client:
        answer = client.get(f"/api/v1/deployments/{name}")
    if answer.status_code != 200:
        return None
    instances = answer.json()["instances"]
    if not instances or instances[0]["state"] != "running" or not instances[0].get("placement"):
        return None
    return dict(instances[0])


def _worker_of(instance: dict[str, Any]) -> str:
    return str(instance["placement"]["ranks"][0]["worker_name"])


def measure(root: Path, *, ray_defaults: bool) -> dict[str, Any]:
    model = build_tiny_qwen3(root / "tiny")
    cluster = start_cluster(root, fast_health_checks=not ray_defaults)
    try:
        with cluster.server.api() as client:
            assert client.post("/api/v1/backends/import", content=ENGINE_DOUBLE_BACKEND_YAML).status_code in (
                200,
                201,
            )
            assert client.post("/api/v1/models", json={"path": str(model), "name": "tiny"}).status_code == 201
        joins = {}
        for name in ("host-a", "host-b"):
            cluster.join(name, [nvml_gpu("NVIDIA L4", 0, 24)])
            joins[name] = cluster.wait_for_state(name, "ready")
        started = time.monotonic()
        with cluster.server.api() as client:
            created = client.post(
                "/api/v1/deployments",
                json={
                    "model": "tiny",
                    "name": "chat",
                    "backend": "vllm-double",
                    "gpus_per_replica": 1,
                    "skip_verification": True,
                },
            )
        assert created.status_code == 201, created.text
        wait_until(lambda: _replica(cluster, "chat") is not None, WAIT_SECONDS, "chat running")
        cold_start = time.monotonic() - started
        replica = _replica(cluster, "chat")
        assert replica is not None
        first = _worker_of(replica)
        killed_at = time.monotonic()
        worker = cluster.workers.pop(first)
        with_group_killed(worker.process, signal.SIGKILL)
        wait_until(lambda: cluster.listed()[first]["state"] == "lost", WAIT_SECONDS, f"{first} lost", 0.1)
        lost = time.monotonic() - killed_at
        wait_until(
            lambda: (found := _replica(cluster, "chat")) is not None and _worker_of(found) != first,
            WAIT_SECONDS,
            "chat on the other host",
            0.1,
        )
        failover = time.monotonic() - killed_at
    finally:
        cluster.close()
    return {
        "health_checks": "ray defaults" if ray_defaults else "0.5 s x 3",
        "join_seconds": joins,
        "cold_start_seconds": round(cold_start, 2),
        "lost_seconds": round(lost, 2),
        "failover_seconds": round(failover, 2),
        "failover_over_cold_start": round(failover / cold_start, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ray-defaults", action="store_true", help="Ray's own health checks (slower to notice)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    arguments = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cluster-failover-") as folder:
        figures = measure(Path(folder), ray_defaults=arguments.ray_defaults)
    figures["load_average_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    joins = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in figures["join_seconds"].items())
    print(f"health checks: {figures['health_checks']}; load average {figures['load_average_before_after']}")
    print(f"  join (worker join -> ready in /api/v1/workers): {joins}")
    print(f"  cold start (baseline: deploy -> running): {figures['cold_start_seconds']:.1f} s")
    print(f"  host SIGKILLed -> lost: {figures['lost_seconds']:.1f} s")
    print(
        f"  host SIGKILLed -> replica running on the other host: {figures['failover_seconds']:.1f} s "
        f"({figures['failover_over_cold_start']:.1f}x the cold start)"
    )
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
