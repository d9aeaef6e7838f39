"""Parallel guessing against a real ``modelyard serve``: how many guesses the throttles let through.

Starts ``modelyard serve --no-demo --gateway-workers N`` (the code on ``PYTHONPATH``) in a
scratch data directory, then sends, all at once and each on its own connection (so the kernel
spreads them over the workers), ``--keys`` requests to ``/v1/models`` with distinct wrong API
keys and ``--passwords`` requests to ``/api/v1/system`` with distinct wrong admin passwords, each
burst from one documentation address (``X-Forwarded-For``, trusted from loopback as from nginx).
Prints how many were answered 401 (each one a key read or a scrypt run) and 429 (refused by the
throttle at no cost), and what ``/metrics`` counted (``modelyard_auth_throttle_attempts_total``,
where the server has it). The allowance is 5 failures per address, then a doubling wait.

    PYTHONPATH=src python benchmarks/throttle_burst.py --keys 300 --passwords 150 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

KEY_GUESSER, PASSWORD_GUESSER = "203.0.113.20", "203.0.113.21"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start(data_dir: Path, port: int, workers: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--data-dir", str(data_dir), "--gateway-workers", str(workers)]
    log = (data_dir.parent / "serve.log").open("wb")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=environment)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"modelyard serve exited {process.returncode}; see {data_dir.parent}/serve.log")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/system", timeout=2).status_code == 401:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("modelyard serve did not answer within 120 s")


Request = tuple[str, dict[str, str], httpx.BasicAuth | None]


async def _burst(url: str, requests: list[Request]) -> list[int]:
    async def one(path: str, headers: dict[str, str], auth: httpx.BasicAuth | None) -> int:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:  # a connection of its own
            return (await client.get(path, headers=headers, auth=auth)).status_code

    return list(await asyncio.gather(*(one(*request) for request in requests)))


def _throttle_metrics(url: str, data_dir: Path) -> list[str]:
    token = (data_dir / "metrics-token").read_text().strip()
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
    return [line for line in text.splitlines() if line.startswith("modelyard_auth_throttle_attempts_total")]


def _report(what: str, url: str, requests: list[Request]) -> None:
    started = time.monotonic()
    statuses = asyncio.run(_burst(url, requests))
    elapsed_s = time.monotonic() - started
    print(f"{what}, all at once ({elapsed_s:.1f} s): {dict(sorted(collections.Counter(statuses).items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--passwords", type=int, default=150)
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="throttle-burst-") as scratch:
        data_dir = Path(scratch) / "data"
        port = _free_port()
        process = _start(data_dir, port, arguments.workers)
        url = f"http://127.0.0.1:{port}"
        try:
            keys: list[Request] = [
                (
                    "/v1/models",
                    {"Authorization": f"Bearer my-wrong-{n:04d}", "X-Forwarded-For": KEY_GUESSER},
                    None,
                )
                for n in range(arguments.keys)
            ]
            _report(f"{arguments.keys} wrong API keys, {arguments.workers} gateway workers", url, keys)
            passwords: list[Request] = [
                (
                    "/api/v1/system",
                    {"X-Forwarded-For": PASSWORD_GUESSER},
                    httpx.BasicAuth("admin", f"guess-{n}"),
                )
                for n in range(arguments.passwords)
            ]
            _report(f"{arguments.passwords} wrong admin passwords", url, passwords)
            for line in _throttle_metrics(url, data_dir):
                print(f"  {line}")
        finally:
            process.terminate()
            process.wait(timeout=60)


if __name__ == "__main__":
    main()
