"""One streamed chat request held open in a thread: the request in flight that a concurrency
limit counts while a test sends the next one."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from modelyard.testing.http_clients import shared_tls_context


class SlowStream:
    """``start()`` returns once the gateway answered the stream's head; ``join()`` once it ended;
    ``statuses`` holds its status code."""

    def __init__(self, base_url: str, key: str, body: dict[str, Any]) -> None:
        self._base_url = base_url
        self._key = key
        self._body = body
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.statuses: list[int] = []

    def _run(self) -> None:
        with (
            httpx.Client(timeout=60, verify=shared_tls_context()) as client,
            client.stream(
                "POST",
                self._base_url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {self._key}"},
                json=self._body,
            ) as response,
        ):
            self._started.set()
            self.statuses.append(response.status_code)
            response.read()

    def start(self) -> None:
        self._thread.start()
        assert self._started.wait(timeout=30), "the slow stream got no answer within 30 s"

    def join(self) -> None:
        self._thread.join(timeout=60)
