"""Replicas on a simulated Ray cluster of two GPU workers: where they land, gangs over two nodes,
a rank killed, a node lost, two deployments sharing one GPU by the estimate."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from modelyard.control.scheduler import Worker
from modelyard.runtimes.base import EngineHandle
from modelyard.runtimes.ray_runtime import RayRuntime
from modelyard.store.tables import Instance, InstanceEvent
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import free_port_window
from ray_cluster import fake_gpu

from .conftest import ClusterSetup


def placed(instance: Instance) -> dict[str, Any]:
    assert instance.placement is not None, instance.reason
    return instance.placement


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


async def test_workers_show_their_gpus_read_on_their_node(cluster_setup: ClusterSetup) -> None:
    def read() -> dict[str, Worker]:
        return {worker.name: worker for worker in cluster_setup.controller.workers()}

    # A node's first probe may not answer in time on a busy host (its Ray worker process still
    # starting): it is probed again at every refresh.
    await cluster_setup.wait_for(
        lambda: all(read().get(name) is not None and read()[name].gpus for name in ("node-a", "node-b")),
        "both nodes' GPUs read",
    )
    workers = read()
    assert {"head", "node-a", "node-b"} <= set(workers)
    assert [gpu.name for gpu in workers["node-a"].gpus] == ["NVIDIA L4", "NVIDIA L4"]
    assert workers["node-a"].gpus[0].memory_total_bytes == 24 << 30
    assert workers["node-a"].labels["zone"] == "a" and workers["head"].gpus == ()
    # Each node's GPUs are its own (its NVML double), not the server's.
    assert workers["node-a"].gpus[0].uuid != workers["node-b"].gpus[0].uuid


async def test_a_tp2_replica_lands_on_one_node_and_answers_there(cluster_setup: ClusterSetup) -> None:
    cluster_setup.add("tp2", gpus=2, placement={"worker_labels": {"zone": "b"}})
    await cluster_setup.wait_for(lambda: len(cluster_setup.running("tp2")) == 1, "tp2 running")
    [instance] = cluster_setup.instances("tp2")
    [rank] = placed(instance)["ranks"]
    assert rank["worker_name"] == "node-b" and rank["gpu_ids"] == [0, 1]
    assert instance.runtime == "ray"
    async with httpx.AsyncClient(trust_env=False, verify=shared_tls_context()) as client:
        models = (await client.get(f"http://{instance.host}:{instance.port}/v1/models")).json()
    assert [model["id"] for model in models["data"]] == ["tp2"]
    cluster_setup.remove("tp2")
    await cluster_setup.wait_for(lambda: not cluster_setup.instances("tp2"), "tp2 removed")


async def test_a_multi_node_replica_runs_as_a_gang_and_restarts_whole_when_rank_1_dies(
    cluster_setup: ClusterSetup,
) -> None:
    cluster_setup.add(
        "gang",
        gpus=2,
        placement={"nodes": 2, "worker_labels": {}},
        parameters=["--tensor-parallel-size", "2"],
    )
    await cluster_setup.wait_for(lambda: len(cluster_setup.running("gang")) == 1, "the gang running")
    [instance] = cluster_setup.instances("gang")
    ranks = placed(instance)["ranks"]
    assert sorted(rank["worker_name"] for rank in ranks) == ["node-a", "node-b"]
    assert all(len(rank["gpu_ids"]) == 1 for rank in ranks)
    assert flag(instance.command, "--nnodes") == "2" and flag(instance.command, "--node-rank") == "0"
    assert flag(instance.command, "--master-addr") == instance.host and "--headless" not in instance.command
    assert instance.log_path is not None
    log = Path(instance.log_path).read_text()
    [rank1_command] = [line for line in log.splitlines() if line.startswith("[rank 1] $ ")]
    assert "--node-rank 1" in rank1_command and "--headless" in rank1_command
    assert f"--master-port {flag(instance.command, '--master-port')}" in rank1_command
    # Rank 1's engine killed (SIGKILL, as the OOM killer would): the whole gang starts again.
    runtime = cluster_setup.controller.runtimes.ray
    assert isinstance(runtime, RayRuntime)
    assert instance.handle is not None
    pids = await runtime.engine_pids(EngineHandle.from_json(instance.handle))
    rank0, rank1 = pids[0], pids[1]
    assert rank0 is not None and rank1 is not None
    os.killpg(rank1, signal.SIGKILL)
    first_start = instance.start_count
    seconds = await cluster_setup.wait_for(
        lambda: any(
            i.start_count > first_start and i.state == "running" for i in cluster_setup.instances("gang")
        ),
        "the gang running again",
    )
    print(f"gang restarted after rank 1's SIGKILL in {seconds:.1f} s")
    [again] = cluster_setup.instances("gang")
    assert again.handle is not None
    assert rank0 not in (await runtime.engine_pids(EngineHandle.from_json(again.handle))).values()
    with pytest.raises(ProcessLookupError):
        os.kill(rank0, 0)  # rank 0 of the first start was stopped with its gang
    cluster_setup.remove("gang")
    await cluster_setup.wait_for(lambda: not cluster_setup.instances("gang"), "gang removed")


async def test_a_lost_node_s_replica_comes_back_on_another_node(cluster_setup: ClusterSetup) -> None:
    cluster_setup.cluster.add_worker("node-c", [fake_gpu("NVIDIA L4", 0, 24)], {"zone": "c"})
    cluster_setup.add("mover", gpus=1, placement={"workers": ["node-c"]})
    await cluster_setup.wait_for(lambda: len(cluster_setup.running("mover")) == 1, "mover on node-c")
    [instance] = cluster_setup.instances("mover")
    assert placed(instance)["ranks"][0]["worker_name"] == "node-c"
    # The selector said node-c; once it is gone, let it go anywhere.
    with cluster_setup.database.session() as session:
        from sqlalchemy import select

        from modelyard.store.tables import Deployment

        deployment = session.scalar(select(Deployment).where(Deployment.name == "mover"))
        assert deployment is not None
        deployment.placement = {}
        session.commit()
    cluster_setup.cluster.remove_worker("node-c")
    seconds = await cluster_setup.wait_for(
        lambda: any(
            i.state == "running" and placed(i)["ranks"][0]["worker_name"] != "node-c"
            for i in cluster_setup.instances("mover")
        ),
        "mover running on another node",
    )
    print(f"replica running again on another node {seconds:.1f} s after its node was removed")
    statuses = {worker.name: worker.ready for worker in cluster_setup.controller.workers()}
    assert statuses["node-c"] is False
    cluster_setup.remove("mover")
    await cluster_setup.wait_for(lambda: not cluster_setup.instances("mover"), "mover removed")


def events_of(cluster_setup: ClusterSetup, *names: str) -> list[InstanceEvent]:
    with cluster_setup.database.session() as session:
        wanted = InstanceEvent.deployment_name.in_(names)
        query = select(InstanceEvent).where(wanted).order_by(InstanceEvent.id)
        return list(session.scalars(query))


async def test_two_small_deployments_share_one_gpu_and_a_third_is_refused_per_gpu(
    cluster_setup: ClusterSetup,
) -> None:
    pinned = {"workers": ["node-a"], "gpu_memory": "auto"}
    cluster_setup.add("small-1", gpus=1, placement=pinned, gpu_ids=[0])
    cluster_setup.add("small-2", gpus=1, placement=pinned, gpu_ids=[0])
    await cluster_setup.wait_for(
        lambda: len(cluster_setup.running("small-1")) == 1 and len(cluster_setup.running("small-2")) == 1,
        "both small deployments running",
    )
    # They started one after the other: an engine sizes its cache from the memory free as it starts.
    events = events_of(cluster_setup, "small-1", "small-2")
    launches = [event for event in events if event.reason.startswith("launching on")]
    running = [event for event in events if event.to_state == "running"]
    first, second = sorted(launches, key=lambda event: event.id)
    first_running = next(event for event in running if event.deployment_name == first.deployment_name)
    assert first_running.id < second.id, [(e.deployment_name, e.to_state, e.reason) for e in events]
    for name in ("small-1", "small-2"):
        [instance] = cluster_setup.instances(name)
        assert placed(instance)["ranks"][0]["gpu_ids"] == [0]
        fraction = placed(instance)["memory_fraction"]
        assert 0 < fraction < 0.5, instance.placement
        assert flag(instance.command, "--gpu-memory-utilization") == f"{fraction:g}"
    cluster_setup.add("big", gpus=1, placement={"workers": ["node-a"], "gpu_memory": "23.5GiB"}, gpu_ids=[0])
    await cluster_setup.wait_for(
        lambda: (
            "waiting for placement: " in cluster_setup.instances("big")[0].reason
            if cluster_setup.instances("big")
            else False
        ),
        "the big one refused",
    )
    [refused] = cluster_setup.instances("big")
    assert refused.state == "pending"
    assert (
        "needs GPU(s) [0] with 23.5 GiB free each on one worker; node-a (2 x NVIDIA L4): 0 fit, the largest "
        "has" in refused.reason
    )
    assert len(refused.reason) < 200
    for name in ("small-1", "small-2", "big"):
        cluster_setup.remove(name)
    await cluster_setup.wait_for(
        lambda: not any(cluster_setup.instances(n) for n in ("small-1", "small-2", "big")), "removed"
    )


async def test_engine_ports_come_from_the_nodes_range_and_a_full_range_is_the_instances_reason(
    cluster_setup: ClusterSetup,
) -> None:
    window = free_port_window(2)
    # A host joined with `worker join --engine-ports A-B`: the range is its node's label.
    cluster_setup.cluster.add_worker(
        "node-p", [fake_gpu("NVIDIA L4", i, 24) for i in range(2)], {"modelyard.io/engine-ports": str(window)}
    )
    other = socket.socket()
    try:
        # Something else on that host listens on the range's first port.
        other.bind(("127.0.0.1", window.first))
        other.listen()
        cluster_setup.add("ported", placement={"workers": ["node-p"]})
        await cluster_setup.wait_for(lambda: len(cluster_setup.running("ported")) == 1, "ported running")
        [first] = cluster_setup.instances("ported")
        assert first.engine_port == window.last and placed(first)["ranks"][0]["worker_name"] == "node-p"
        cluster_setup.add("crowded", placement={"workers": ["node-p"]})
        expected = f"no free engine port in {window} on worker node-p: 2 in use; widen --engine-ports"
        await cluster_setup.wait_for(
            lambda: any(expected in (found.reason or "") for found in cluster_setup.instances("crowded")),
            "crowded refused for its port",
        )
        [refused] = cluster_setup.instances("crowded")
        assert refused.state == "error"
        # The deployment already there is not disturbed.
        assert [instance.engine_port for instance in cluster_setup.running("ported")] == [window.last]
        async with httpx.AsyncClient(trust_env=False, verify=shared_tls_context()) as client:
            answer = await client.get(f"http://{first.host}:{first.port}/v1/models")
        assert answer.status_code == 200
    finally:
        other.close()
    # The port is free again: the next start of the refused one takes it.
    await cluster_setup.wait_for(lambda: len(cluster_setup.running("crowded")) == 1, "crowded running")
    assert [instance.engine_port for instance in cluster_setup.running("crowded")] == [window.first]
    for name in ("ported", "crowded"):
        cluster_setup.remove(name)
    await cluster_setup.wait_for(
        lambda: not any(cluster_setup.instances(name) for name in ("ported", "crowded")), "removed"
    )
    cluster_setup.cluster.remove_worker("node-p")
