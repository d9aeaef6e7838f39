"""The read timeout measures an engine's silence, not the length of its answer.

A gateway with a read timeout of 1 s in front of two engine doubles: one that streams for 2 s
with a token every 150 ms (never silent for long), and one that answers its first token only
after 6 s (its headers come at once, then nothing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from modelyard.server.context import ServerContext
from modelyard.server.gateway import GatewaySettings
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness, ReferenceServers, data_events

READ_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHarness]:
    data_dir = tmp_path_factory.mktemp("impatient-gateway")
    database = Database.open("sqlite:///" + str(data_dir / "modelyard.db"))
    settings = GatewaySettings(usage_batch_delay_s=0.0, read_timeout_s=READ_TIMEOUT_S)
    harness = GatewayHarness(
        database=database,
        context=ServerContext(settings=Settings(data_dir=data_dir, deploy_demo=False), database=database),
        settings=settings,
    )
    harness.start()
    yield harness
    harness.stop()
    database.close()


def stream(gateway: GatewayHarness, key: str, deployment: str) -> tuple[list[bytes], float]:
    body = {"model": deployment, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    started = time.monotonic()
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert response.status_code == 200, response.text
    return data_events(response.content), time.monotonic() - started


def test_a_stream_longer_than_the_read_timeout_is_relayed_whole(
    impatient: GatewayHarness, engines: ReferenceServers
) -> None:
    server = engines.get("steady", ttft_ms=150, itl_ms=150, output_tokens=13, served_model_names=["steady"])
    impatient.publish("steady", [server])
    events, elapsed_s = stream(impatient, impatient.create_key(), "steady")
    assert elapsed_s > 1.8 * READ_TIMEOUT_S
    assert events[-1] == b"[DONE]" and b'"finish_reason":"length"' in events[-2]
    assert not any(b"stream_interrupted" in event for event in events)


def test_an_engine_silent_past_the_read_timeout_is_cut_with_an_error_event(
    impatient: GatewayHarness, engines: ReferenceServers
) -> None:
    server = engines.get("silent", ttft_ms=6000, itl_ms=0, output_tokens=2, served_model_names=["silent"])
    impatient.publish("silent", [server])
    events, elapsed_s = stream(impatient, impatient.create_key(), "silent")
    # Cut once the watchdog (every read_timeout / 4) sees 1 s of silence, long before the 6 s.
    assert READ_TIMEOUT_S <= elapsed_s < 4.0
    assert events[-1] == b"[DONE]"
    assert b'"code":"stream_interrupted"' in events[-2].replace(b" ", b"")
    assert b"stopped in the middle of the answer: the engine sent nothing for 1 s" in events[-2]
