"""``modelyard serve --access-log`` on a real server: a line per ``/v1`` answer, from the worker
that answered it (or the main process with ``--gateway-workers 0``), streamed or whole, written
straight onto the connection or not; nothing without the flag.

The engine is the engine double playing vLLM, deployed through the REST API. The server is
stopped (SIGTERM: every process ends its log) before its log is read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import wait_until

from .served import ServedPlatform

pytestmark = pytest.mark.slow

DEPLOYMENT = "logged"
# client - "METHOD PATH HTTP/V" STATUS BYTES DURATIONms REQUEST_ID (server/access_log.py)
ACCESS_LINE = re.compile(
    r"(?P<process>\S+)\[\d+\] INFO modelyard\.access: (?P<client>\S+) - "
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" (?P<status>\d{3}|-) (?P<bytes>\d+) '
    r"(?P<duration>\d+\.\d)ms (?P<request_id>\S+)$"
)


@contextmanager
def _served(scratch: Path, workers: int, *arguments: str) -> Iterator[ServedPlatform]:
    served = ServedPlatform(scratch / "data", gateway_workers=workers)
    served.start(extra_arguments=arguments)
    try:
        served.deploy_double(DEPLOYMENT, scratch)
        yield served
    finally:
        served.stop()


def _chat(served: ServedPlatform, key: str, marker: str, *, stream: bool) -> httpx.Response:
    body = {
        "model": DEPLOYMENT,
        "messages": [{"role": "user", "content": f"say {marker}"}],
        "max_tokens": 4,
        "stream": stream,
    }
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json=body,
        timeout=30,
        trust_env=False,
        verify=shared_tls_context(),
    )
    assert response.status_code == 200, response.text
    return response


def _access_lines(log: str) -> list[re.Match[str]]:
    return [match for line in log.splitlines() if (match := ACCESS_LINE.search(line))]


def _log(served: ServedPlatform) -> str:
    return (served.data_dir.parent / "serve.log").read_text(errors="replace")


@pytest.mark.parametrize("workers", [2, 0])
def test_every_v1_answer_gets_an_access_line_from_the_process_that_answered(
    tmp_path: Path, workers: int
) -> None:
    answered_by = {"gateway-worker-0", "gateway-worker-1"} if workers else {"MainProcess"}
    marker = uuid.uuid4().hex
    with _served(tmp_path, workers, "--access-log") as served:
        key = served.create_key("logged-client")
        streamed = _chat(served, key, marker, stream=True)
        whole = _chat(served, key, marker, stream=False)

        def every_process_logged() -> bool:
            # New connections until the kernel has given one to each worker (SO_REUSEPORT).
            headers = {"Authorization": f"Bearer {key}"}
            httpx.get(
                f"{served.url}/v1/models",
                headers=headers,
                timeout=30,
                trust_env=False,
                verify=shared_tls_context(),
            )
            return {line["process"] for line in _access_lines(_log(served))} >= answered_by

        wait_until(every_process_logged, 60, f"an access line from each of {sorted(answered_by)}")
    log = _log(served)  # the server has stopped: every process has written its log
    lines = {line["request_id"]: line for line in _access_lines(log)}
    for response in (streamed, whole):
        line = lines[response.headers["x-request-id"]]
        assert line["process"] in answered_by
        assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/chat/completions", "200")
        assert int(line["bytes"]) == len(response.content)
        assert line["client"].startswith("127.0.0.1:")
    assert streamed.content.endswith(b"data: [DONE]\n\n")
    # Never a body, never the Authorization header.
    assert marker not in log and key not in log


def test_without_the_flag_no_answer_is_logged(tmp_path: Path) -> None:
    with _served(tmp_path, 1) as served:
        key = served.create_key("quiet-client")
        request_ids = [
            _chat(served, key, "quiet", stream=stream).headers["x-request-id"] for stream in (True, False)
        ]
    log = _log(served)
    assert "modelyard.access" not in log
    assert not any(request_id in log for request_id in request_ids)
