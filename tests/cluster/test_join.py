"""A cluster as a user runs it: ``modelyard serve --cluster`` (its own Ray head, token
authentication on), two hosts joined with ``modelyard worker join`` (two more raylets on this
host, each with an NVML double of its GPUs), shown by ``modelyard workers`` and
``GET /api/v1/workers``, a deployment on a joined host answering through the gateway, the host
killed, marked lost, and the replica running again on the other host.

The engine is the engine double (``modelyard.bench.reference_server``) as a GPUStack-YAML
backend. Join and failover times are printed (``-s``); docs/clusters.md quotes them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelyard.runtimes.engine_ports import PortRange
from modelyard.testing.cluster_process import ENGINE_DOUBLE_BACKEND_YAML, JoinedCluster, chat, start_cluster
from modelyard.testing.serve_process import wait_until
from ray_cluster import fake_gpu, require_ray_for_tests

pytestmark = pytest.mark.slow


FAILOVER_SECONDS = 120.0
# Outside Ray's worker ports (10002-19999) and the kernel's ephemeral ones (32768-60999).
NODE_A_ENGINE_PORTS = PortRange(29100, 29119)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[JoinedCluster]:
    require_ray_for_tests()
    root = tmp_path_factory.mktemp("joined")
    # No NVML here: the head's host offers no GPU, so replicas go to the joined hosts.
    joined = start_cluster(root)
    try:
        with joined.server.api() as client:
            imported = client.post("/api/v1/backends/import", content=ENGINE_DOUBLE_BACKEND_YAML)
            assert imported.status_code in (200, 201), imported.text
            added = client.post("/api/v1/models", json={"path": str(tiny_model_dir), "name": "tiny"})
            assert added.status_code == 201, added.text
        yield joined
    finally:
        joined.close()


def test_serve_cluster_prints_the_token_file_join_never_the_token_and_keeps_it_0600(
    cluster: JoinedCluster,
) -> None:
    token = cluster.token_file.read_text().strip()
    assert stat.S_IMODE(os.stat(cluster.token_file).st_mode) == 0o600
    log = cluster.server.log()
    assert f"modelyard worker join {cluster.head_address()} --token-file cluster-token" in log
    host = cluster.head_address().rpartition(":")[0]
    assert f"scp {host}:{cluster.token_file} cluster-token" in log
    assert token not in log
    assert token not in (cluster.server.data_dir / "cluster-head.log").read_text()


def test_joined_hosts_show_their_gpus_state_labels_and_last_seen(cluster: JoinedCluster) -> None:
    cluster.join(
        "node-a",
        [fake_gpu("NVIDIA L4", index, 24) for index in range(2)],
        {"zone": "a"},
        arguments=("--engine-ports", str(NODE_A_ENGINE_PORTS)),
    )
    seconds = cluster.wait_for_state("node-a", "ready")
    print(
        f"join time: `worker join` started -> node-a ready with its GPUs in /api/v1/workers: {seconds:.1f} s"
    )
    # A host whose Docker does not answer.
    cluster.join(
        "node-b",
        [fake_gpu("NVIDIA L4", 0, 24, used_gib=2.0)],
        {"zone": "b"},
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    cluster.wait_for_state("node-b", "ready")
    workers = cluster.listed()
    node_a = workers["node-a"]
    assert node_a["labels"]["zone"] == "a" and node_a["last_seen_at"] is not None
    assert [(gpu["index"], gpu["name"], gpu["memory_total_bytes"]) for gpu in node_a["gpus"]] == [
        (0, "NVIDIA L4", 24 << 30),
        (1, "NVIDIA L4", 24 << 30),
    ]
    assert node_a["gpus"][0]["temperature_celsius"] == 35
    assert workers["node-b"]["gpus"][0]["memory_used_bytes"] == 2 << 30
    table = cluster.cli("workers", env={"COLUMNS": "250"})
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith("node-a")]
    assert "ready" in row and "zone=a" in row and "NVIDIA L4" in row and "0.0/24.0" in row


def test_each_join_reports_whether_its_docker_answers_and_has_the_nvidia_runtime(
    cluster: JoinedCluster,
) -> None:
    if "node-b" not in cluster.workers:
        pytest.skip("needs the hosts joined by the test before")
    problem = docker_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Docker is required under CI: {problem}")
        pytest.skip(problem)
    workers = cluster.listed()
    # The server's own node (the head) recorded its Docker when it started.
    [head] = [worker for name, worker in workers.items() if name not in ("node-a", "node-b")]
    assert head["docker"] == {"engine": "ready", "gpus": "none"}
    # This machine's dockerd answers and has no NVIDIA runtime (no GPU here).
    assert workers["node-a"]["docker"] == {"engine": "ready", "gpus": "none"}
    assert workers["node-b"]["docker"] == {"engine": "unreachable", "gpus": "none"}
    assert workers["node-a"]["engine_ports"] == str(NODE_A_ENGINE_PORTS)
    assert workers["node-b"]["engine_ports"] is None
    joined = cluster.workers["node-b"].log()
    assert "Docker: unreachable (the Docker daemon is not reachable: " in joined
    assert "image backends will not be placed on this host" in joined
    table = cluster.cli("workers", env={"COLUMNS": "250"})
    rows = {line.split()[0]: line for line in table.stdout.splitlines() if line.startswith("node-")}
    assert "no GPU runtime" in rows["node-a"] and str(NODE_A_ENGINE_PORTS) in rows["node-a"]
    assert "unreachable" in rows["node-b"] and " any " in rows["node-b"]
    # modelyard's own labels have columns; LABELS shows the user's.
    assert "modelyard.io/" not in table.stdout


def docker_problem() -> str | None:
    """Why this machine's Docker engine cannot be used (None: ``docker info`` answers)."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False, timeout=30)
    return None if probe.returncode == 0 else f"dockerd is not usable: {probe.stderr.strip()[-200:]}"


def _assert_in_the_hosts_engine_ports(worker: str, instance: dict[str, Any]) -> None:
    """node-a joined with --engine-ports: its engines' ports come from that range."""
    if worker == "node-a":
        assert instance["engine_port"] in NODE_A_ENGINE_PORTS, instance["engine_port"]


def _placed_on(cluster: JoinedCluster, name: str) -> tuple[str, dict[str, Any]] | None:
    with cluster.server.api() as client:
        answer = client.get(f"/api/v1/deployments/{name}")
    if answer.status_code != 200:
        return None
    [instance] = answer.json()["instances"]
    if instance["state"] != "running" or not instance.get("placement"):
        return None
    return instance["placement"]["ranks"][0]["worker_name"], instance


def test_a_replica_on_a_joined_host_answers_and_moves_when_the_host_dies(cluster: JoinedCluster) -> None:
    if "node-b" not in cluster.workers:
        pytest.skip("needs the hosts joined by the test before")
    deployed = cluster.cli(
        "deploy",
        "tiny",
        "--name",
        "chat",
        "--backend",
        "vllm-double",
        "--gpus",
        "1",
        "--skip-verification",
        "--timeout",
        "120",
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    placed = _placed_on(cluster, "chat")
    assert placed is not None
    first_worker, instance = placed
    assert first_worker in ("node-a", "node-b") and instance["runtime"] == "ray"
    _assert_in_the_hosts_engine_ports(first_worker, instance)
    shown = cluster.cli("ps", "chat")
    [engine_row] = [line for line in shown.stdout.splitlines() if "ray gang" in line]
    assert first_worker in engine_row and instance["host"] in engine_row
    key = cluster.cli("keys", "create", "me", "--rotate").stdout.strip()
    answer = chat(cluster.server.url, key, "chat")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]

    import time

    killed_at = time.monotonic()
    cluster.kill_worker(first_worker)
    cluster.wait_for_state(first_worker, "lost")
    lost_after = time.monotonic() - killed_at
    wait_until(
        lambda: (found := _placed_on(cluster, "chat")) is not None and found[0] != first_worker,
        FAILOVER_SECONDS,
        "chat running on the other host",
        interval=0.2,
    )
    failover = time.monotonic() - killed_at
    print(
        f"failover: {first_worker} killed -> lost in /api/v1/workers after {lost_after:.1f} s, "
        f"-> replica running on the other host after {failover:.1f} s"
    )
    answer = chat(cluster.server.url, key, "chat")
    assert answer.status_code == 200, answer.text
    moved = _placed_on(cluster, "chat")
    assert moved is not None
    _assert_in_the_hosts_engine_ports(*moved)
    listed = cluster.listed()[first_worker]
    assert listed["state"] == "lost" and listed["last_seen_at"] is not None


def test_a_server_killed_with_sigkill_comes_back_to_its_head_and_takes_its_engine_back(
    cluster: JoinedCluster,
) -> None:
    if "node-b" not in cluster.workers:
        pytest.skip("needs the deployment of the test before")
    placed = _placed_on(cluster, "chat")
    assert placed is not None
    worker, before = placed
    cluster.restart_after_sigkill()
    assert "the Ray head started earlier runs at" in cluster.server.log()
    wait_until(
        lambda: _placed_on(cluster, "chat") is not None, FAILOVER_SECONDS, "chat running again", interval=0.2
    )
    after = _placed_on(cluster, "chat")
    assert after is not None and after[0] == worker
    # The same engine, re-adopted: no new start.
    assert after[1]["engine_id"] == before["engine_id"] and after[1]["start_count"] == before["start_count"]
    key = cluster.cli("keys", "create", "again", "--rotate").stdout.strip()
    answer = chat(cluster.server.url, key, "chat")
    assert answer.status_code == 200, answer.text
    assert cluster.listed()[worker]["state"] == "ready"


@pytest.mark.skipif(os.geteuid() != 0, reason="a host without the model needs a mount namespace (root)")
def test_a_host_without_the_model_directory_is_named_before_the_deploy_and_at_its_start(
    cluster: JoinedCluster, tiny_model_dir: Path
) -> None:
    if "node-b" not in cluster.workers:
        pytest.skip("needs the hosts joined by the tests before")
    with cluster.server.api() as client:
        assert client.delete("/api/v1/deployments/chat").status_code == 202
    cluster.join("node-c", [fake_gpu("NVIDIA L4", 0, 24)], {"zone": "c"}, hidden=tiny_model_dir.parent)
    cluster.wait_for_state("node-c", "ready")
    body = {"model": "tiny", "name": "pinned", "backend": "vllm-double", "gpus_per_replica": 1}
    with cluster.server.api() as client:
        created = client.post(
            "/api/v1/deployments", json={**body, "skip_verification": True, "workers": ["node-c"]}
        )
    assert created.status_code == 201, created.text
    [warning] = [w for w in created.json()["warnings"] if w["check_id"] == "model.missing-on-some-workers"]
    assert "is not usable on 1 of 2 GPU workers (node-c: " in warning["message"]
    assert warning["details"]["problems"].keys() == {"node-c"}

    def waiting_for_the_files() -> bool:
        with cluster.server.api() as client:
            instances = client.get("/api/v1/deployments/pinned").json()["instances"]
        # Not placed there once the survey of the workers' models has seen node-c (a start placed
        # before that fails at once, naming the missing directory, and is placed again).
        return any(
            instance["state"] == "pending"
            and "the files of model tiny are on none of the workers it may use (node-c: missing); "
            "copy them there: modelyard models push tiny --worker node-c"
            in (instance["reason"] or "")
            for instance in instances
        )

    wait_until(waiting_for_the_files, FAILOVER_SECONDS, "the replica waiting for its files on node-c")
    with cluster.server.api() as client:
        assert client.delete("/api/v1/deployments/pinned").status_code == 202
    cluster.kill_worker("node-b")
    cluster.wait_for_state("node-b", "lost")
    with cluster.server.api() as client:
        refused = client.post("/api/v1/deployments", json={**body, "name": "nowhere"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "preflight_failed"
    assert (
        f"the model directory {tiny_model_dir} is not usable on any GPU worker (node-c: " in error["message"]
    )


def test_a_join_with_another_cluster_s_token_is_refused_by_the_head_and_says_so(
    cluster: JoinedCluster,
) -> None:
    wrong = "f" * 64
    done = cluster.cli("worker", "join", cluster.head_address(), "--token", wrong, "--name", "intruder")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"the head at {cluster.head_address()} refused the cluster token" in done.stderr
    assert "--token-file" in done.stderr and wrong not in done.stderr
    assert "intruder" not in cluster.listed()
