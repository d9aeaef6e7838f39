"""Routing across replicas: least outstanding requests, and skipping replicas that cannot be reached."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from modelyard.control.endpoints import Endpoint
from modelyard.control.scheduler import LOCAL_WORKER, Worker, local_worker
from modelyard.hardware.gpus import GpuInventory
from modelyard.server.gateway.responses import CLIENT_CLOSED_REQUEST
from modelyard.testing.http_clients import shared_tls_context

from .conftest import (
    DroppingListener,
    GatewayHarness,
    ReferenceServers,
    engine_counter,
    engine_gauge,
    refused_port,
    unique_name,
)


def client(gateway: GatewayHarness, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def closed_port() -> Iterator[int]:
    sock = refused_port()
    yield sock.getsockname()[1]
    sock.close()


def publish_with_a_dead_replica(
    gateway: GatewayHarness, engines: ReferenceServers, closed_port: int, prefix: str
) -> str:
    """A deployment of two replicas, the first refusing connections; returns its name."""
    server = engines.get("vllm", served_model_names=["vllm-model"])
    deployment = unique_name(prefix)
    gateway.publish_endpoints(
        deployment,
        [
            Endpoint(deployment, 1, f"http://127.0.0.1:{closed_port}", "vllm-model"),
            Endpoint(deployment, 2, server.base_url, "vllm-model"),
        ],
    )
    return deployment


def test_requests_go_to_the_replica_with_fewer_outstanding(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    first = engines.get("pair-a", itl_ms=300.0, served_model_names=["pair-model"])
    second = engines.get("pair-b", itl_ms=300.0, served_model_names=["pair-model"])
    deployment = unique_name("pair")
    gateway.publish(deployment, [first, second])
    done_before = {server.base_url: engine_counter(server, "request_success") for server in (first, second)}
    openai_client = client(gateway, api_key)
    long_stream = openai_client.chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "long"}], stream=True, max_tokens=4
    )
    with long_stream:
        next(iter(long_stream))  # the long answer is now in flight on one replica
        busy = first if engine_gauge(first, "num_requests_running") == 1 else second
        idle = second if busy is first else first
        assert engine_gauge(idle, "num_requests_running") == 0
        for _ in range(4):
            openai_client.chat.completions.create(
                model=deployment, messages=[{"role": "user", "content": "short"}], max_tokens=1
            )
        done_during = {
            server.base_url: engine_counter(server, "request_success") for server in (first, second)
        }
        list(long_stream)
    assert done_during[idle.base_url] - done_before[idle.base_url] == 4
    assert done_during[busy.base_url] - done_before[busy.base_url] == 0


def test_an_unreachable_replica_is_skipped_before_anything_was_sent(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers, closed_port: int
) -> None:
    deployment = publish_with_a_dead_replica(gateway, engines, closed_port, "half-gone")
    openai_client = client(gateway, api_key)
    for _ in range(4):
        answer = openai_client.chat.completions.create(
            model=deployment, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert answer.choices[0].message.content
        streamed = list(
            openai_client.chat.completions.create(
                model=deployment, messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=2
            )
        )
        assert streamed
    assert all(row.status_code == 200 for row in gateway.usage_rows(deployment))


class PokeCounter:
    """Stands in for the controller: counts the gateway's calls to look now."""

    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1

    def gpu_inventory(self) -> GpuInventory:
        return GpuInventory(unavailable_reason="test")

    def workers(self) -> list[Worker]:
        return [local_worker(self.gpu_inventory(), LOCAL_WORKER)]


def test_a_refused_replica_is_tried_once_and_the_controller_told(
    gateway: GatewayHarness,
    api_key: str,
    engines: ReferenceServers,
    closed_port: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An engine that just died answers nothing and has nothing outstanding: without a hold, every
    # request would try it first and pay a refused connection until the controller noticed.
    controller = PokeCounter()
    monkeypatch.setattr(gateway.context, "controller", controller)
    deployment = publish_with_a_dead_replica(gateway, engines, closed_port, "one-dead")
    openai_client = client(gateway, api_key)
    with caplog.at_level(logging.WARNING, logger="modelyard.server.gateway.proxy"):
        for _ in range(6):
            answer = openai_client.chat.completions.create(
                model=deployment, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert answer.choices[0].message.content
    retries = [record for record in caplog.records if "could not take a request" in record.getMessage()]
    assert len(retries) == 1
    assert controller.pokes == 1


def test_outstanding_counts_return_to_zero_after_answers_and_errors(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    server = engines.get("vllm", served_model_names=["vllm-model"])
    deployment = unique_name("counts")
    gateway.publish(deployment, [server])
    headers = {"Authorization": f"Bearer {api_key}"}

    def request(body: dict[str, object]) -> None:
        httpx.post(
            gateway.base_url + "/v1/chat/completions",
            headers=headers,
            json=body,
            timeout=30,
            verify=shared_tls_context(),
        )

    bodies: list[dict[str, object]] = [
        {"model": deployment, "messages": [{"role": "user", "content": "a"}]},
        {"model": deployment, "messages": [{"role": "user", "content": "a"}], "stream": True},
        {"model": deployment, "messages": [{"role": "user", "content": "a"}], "max_tokens": 10**9},
    ]
    threads = [threading.Thread(target=request, args=(body,)) for body in bodies * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert gateway.outstanding(server.base_url) == 0
    statuses = sorted(row.status_code for row in gateway.usage_rows(deployment))
    assert statuses == [200] * 6 + [400] * 3
    assert CLIENT_CLOSED_REQUEST not in statuses


def test_a_replica_that_drops_connections_gets_one_more_try_then_is_skipped(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    server = engines.get("vllm", served_model_names=["vllm-model"])
    deployment = unique_name("dropping")
    with DroppingListener() as dropping:
        dropping_endpoint = Endpoint(deployment, 1, f"http://127.0.0.1:{dropping.port}", "vllm-model")
        gateway.publish_endpoints(
            deployment, [dropping_endpoint, Endpoint(deployment, 2, server.base_url, "vllm-model")]
        )
        for _ in range(3):
            answer = client(gateway, api_key).chat.completions.create(
                model=deployment, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert answer.choices[0].message.content
        assert dropping.accepted <= 2 * 3
        gateway.publish_endpoints(deployment, [dropping_endpoint])
        before = dropping.accepted
        response = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {api_key}"},
            json={"model": deployment, "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
            verify=shared_tls_context(),
        )
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "engine_unreachable"
        assert dropping.accepted - before == 2
