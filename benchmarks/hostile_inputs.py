"""What hostile requests cost a real ``modelyard serve``: memory, time, and the other clients' wait.

Each case is measured against a baseline measured in the same run (an ordinary request, the
server's resting RSS):

- an unauthenticated 50 MB body to ``/api/v1/models``, one and four at once: RSS growth and
  time to the 413;
- a 64 MiB header: time to the 431, RSS growth, and the latency of another client's request
  sent meanwhile against its latency at rest;
- the 554-byte YAML alias bomb of the issue (9 levels of 9 aliases) to the backend import;
- a wrong password for ``admin`` against a login as a user that does not exist (their ratio
  should be near 1: the time does not tell which users exist);
- JSON nested ``[[[...`` deep: 1 MiB to ``/api/v1/keys`` without credentials (one and four at
  once), 1 MiB and 8 MiB to ``/v1/chat/completions`` with a key: time to the 400 and the longest
  wait of another client's requests meanwhile (the event loop's stall), against its wait at rest;
  and a legal 8 MiB body of 270,000 small messages (its parse holds the loop);
- 500 connections sending their request head a byte a second: how many the server still holds
  3 s and 25 s after they opened (the header timeout is 20 s by default; at most 128 connections
  of a process are given that long, the others one second).

    python benchmarks/hostile_inputs.py [--json FILE]

Takes about two minutes; never run as a test. Run it with ``PYTHONPATH`` pointing at another
checkout's ``src`` to measure that version (the server is started with the same interpreter
and environment).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start(folder: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    command = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
    log = open(folder / "serve.log", "wb")  # noqa: SIM115 - the child's log
    process = subprocess.Popen(
        [*command, "--data-dir", str(folder / "data"), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.get(url + "/api/v1/system", timeout=2)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return process, url, (folder / "data" / "admin-password").read_text().strip()


def create_key(url: str, password: str) -> str:
    with httpx.Client(base_url=url, timeout=60, auth=("admin", password)) as admin:
        response = admin.post("/api/v1/keys", json={"name": "hostile-benchmark"})
        response.raise_for_status()
        key: str = response.json()["key"]
        return key


def rss_mib(process: subprocess.Popen[bytes]) -> float:
    return psutil.Process(process.pid).memory_info().rss / MIB


def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def big_bodies(url: str, count: int) -> list[int]:
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(timeout=120) as client:
            statuses.append(client.post(url + "/api/v1/models", content=b"x" * (50 * MIB)).status_code)

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def big_header(port: int) -> tuple[float, bytes]:
    started = time.perf_counter()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as connection:
        connection.sendall(b"GET /api/v1/system HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            piece = b"a" * (1 * MIB)
            for _ in range(64):
                connection.sendall(piece)
            connection.sendall(b"\r\n\r\n")
        except OSError:
            pass
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except OSError:
            pass
    return (time.perf_counter() - started) * 1000, answer[:40]


def bomb(levels: int) -> str:
    lines = ["backend_name: bomb", 'icon: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels + 1):
        lines.append(f"k{level}: &a{level} [" + ",".join([f"*a{level - 1}"] * 9) + "]")
    lines.append("version_configs: {'1.0': {run_command: 'serve {{model_path}}'}}")
    return "\n".join(lines) + "\n"


def stall_during(probe: Any, hostile: Any) -> dict[str, Any]:
    """Run ``hostile()`` while another client calls ``probe()`` over and over; the longest wait."""
    waits: list[float] = []
    done = threading.Event()

    def meanwhile() -> None:
        while not done.is_set():
            waits.append(timed(probe)[0])

    other = threading.Thread(target=meanwhile)
    other.start()
    elapsed, statuses = timed(hostile)
    done.set()
    other.join()
    return {"statuses": statuses, "ms": round(elapsed, 1), "other_client_max_ms": round(max(waits), 1)}


def deep_bodies(url: str, path: str, size_bytes: int, count: int, key: str | None) -> list[int]:
    half = size_bytes // 2
    body = b"[" * half + b"]" * half
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(timeout=300) as client:
            statuses.append(client.post(url + path, content=body, headers=headers).status_code)

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def wide_body(url: str, size_bytes: int, key: str) -> list[int]:
    message = b'{"role":"user","content":"x"},'
    messages = message * (size_bytes // len(message)) + message[:-1]
    body = b'{"model":"no-such-model","messages":[' + messages + b"]}"
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=300) as client:
        return [client.post(url + "/v1/chat/completions", content=body, headers=headers).status_code]


def slow_heads(port: int, count: int) -> dict[str, int]:
    """Open ``count`` connections that send their head a byte a second; how many stay open."""
    connections = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    done = threading.Event()

    def still_open() -> list[socket.socket]:
        # Readable: the server answered (408) or closed; it writes nothing else to these.
        poller = select.poll()
        for connection in connections:
            poller.register(connection, select.POLLIN)
        readable = {descriptor for descriptor, _ in poller.poll(0)}
        return [connection for connection in connections if connection.fileno() not in readable]

    def dribble() -> None:
        head = b"GET /api/v1/system HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        for byte in head:
            for connection in still_open():
                with contextlib.suppress(OSError):
                    connection.send(bytes([byte]))
            if done.wait(1.0):
                return

    sender = threading.Thread(target=dribble)
    started = time.monotonic()
    sender.start()
    held: dict[str, int] = {}
    try:
        for after_s in (3, 25):
            time.sleep(max(0.0, started + after_s - time.monotonic()))
            held[f"held_after_{after_s}_s"] = len(still_open())
    finally:
        done.set()
        sender.join()
        for connection in connections:
            connection.close()
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="modelyard-hostile-"))
    process, url, password = start(folder)
    port = int(url.rsplit(":", 1)[1])
    figures: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            rest_ms = statistics.median(timed(lambda: client.get("/api/v1/system"))[0] for _ in range(20))
        figures["baseline_request_ms"] = round(rest_ms, 2)
        figures["rss_at_rest_mib"] = round(rss_mib(process), 1)

        for count in (1, 4):
            before = rss_mib(process)
            elapsed, statuses = timed(lambda count=count: big_bodies(url, count))
            figures[f"body_50mb_x{count}"] = {
                "statuses": statuses,
                "rss_growth_mib": round(rss_mib(process) - before, 1),
                "ms": round(elapsed, 1),
            }

        before = rss_mib(process)
        waits: list[float] = []

        def meanwhile() -> None:
            with httpx.Client(base_url=url, timeout=120) as client:
                for _ in range(20):
                    waits.append(timed(lambda: client.get("/api/v1/system"))[0])

        other = threading.Thread(target=meanwhile)
        other.start()
        header_ms, answer = big_header(port)
        other.join()
        figures["header_64mib"] = {
            "answer": answer.decode(errors="replace").split("\r\n")[0],
            "ms_to_refusal": round(header_ms, 1),
            "rss_growth_mib": round(rss_mib(process) - before, 1),
            "other_client_max_ms": round(max(waits), 1),
            "other_client_max_over_baseline": round(max(waits) / rest_ms, 1),
        }

        text = bomb(9)
        with httpx.Client(base_url=url, timeout=120, auth=("admin", password)) as admin:
            bomb_ms, response = timed(lambda: admin.post("/api/v1/backends/import", content=text.encode()))
        figures["alias_bomb"] = {
            "bytes": len(text.encode()),
            "status": response.status_code,
            "ms": round(bomb_ms, 1),
            "over_baseline": round(bomb_ms / rest_ms, 1),
        }

        with httpx.Client(base_url=url, timeout=60) as client:
            wrong = [
                timed(lambda: client.get("/api/v1/system", auth=("admin", "wrong-guess")))[0]
                for _ in range(3)
            ]
            unknown = [
                timed(lambda: client.get("/api/v1/system", auth=("nobody", "wrong-guess")))[0]
                for _ in range(3)
            ]
        figures["login_timing_ms"] = {
            "wrong_password_for_admin": round(statistics.median(wrong), 1),
            "unknown_user": round(statistics.median(unknown), 1),
            "unknown_over_wrong": round(statistics.median(unknown) / statistics.median(wrong), 2),
        }

        key = create_key(url, password)
        with httpx.Client(base_url=url, timeout=60) as client:
            rest_models_ms = statistics.median(
                timed(lambda: client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}))[0]
                for _ in range(20)
            )
        figures["baseline_models_ms"] = round(rest_models_ms, 2)

        def probe_system() -> None:
            with httpx.Client(base_url=url, timeout=300) as client:
                client.get("/api/v1/system")

        def probe_models() -> None:
            with httpx.Client(base_url=url, timeout=300) as client:
                client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})

        for count in (1, 4):
            figures[f"deep_1mib_keys_x{count}"] = stall_during(
                probe_system, lambda count=count: deep_bodies(url, "/api/v1/keys", MIB, count, None)
            )
        for size_mib in (1, 8):
            figures[f"deep_{size_mib}mib_chat_with_key"] = stall_during(
                probe_models,
                lambda size_mib=size_mib: deep_bodies(url, "/v1/chat/completions", size_mib * MIB, 1, key),
            )
        # A legal body of many small values: what parsing it holds the loop (the model does not
        # exist: answered 404 once the body is parsed).
        figures["wide_8mib_chat_with_key"] = stall_during(probe_models, lambda: wide_body(url, 8 * MIB, key))
        figures["slow_heads_500"] = slow_heads(port, 500)
    finally:
        process.terminate()
        process.wait(timeout=60)
    print(json.dumps(figures, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
