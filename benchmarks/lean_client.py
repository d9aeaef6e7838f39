"""A lean streaming client for the gateway benchmarks: N closed-loop streams on raw asyncio protocols.

Each stream keeps one keep-alive connection and sends the same request again as soon as the last
answer ended. Bytes go from the socket into httptools; a chunk is counted by the ``data:`` events
in it; time to first token is taken when the first body bytes of an answer arrive. No per-chunk
task, future or JSON parsing, so the client stays far cheaper than what it measures.

Starts: ``together`` (every stream sends at the same instant, as a closed loop with fixed output
lengths keeps doing) or ``spread`` (stream ``i`` starts ``i / N`` of one answer's duration
later, so arrivals are even). Requests that start in the warm-up are not measured.

    python benchmarks/lean_client.py --url http://127.0.0.1:8080 --model ref --streams 32 \
        --output-tokens 64 --duration-s 10 --start spread --answer-s 0.34 --json out.json

The API key, when there is one, comes from ``$BENCH_API_KEY`` (never on a command line).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop


class EventWindow(Protocol):
    """Where a connection counts the ``data:`` events that arrive inside a measured window."""

    window_from_ns: int
    window_end_ns: int
    window_events: int


class StreamConnection(asyncio.Protocol):
    def __init__(self, client: EventWindow) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.sent_ns = 0
        self.first_ns = 0
        self.events = 0
        self.status = 0
        self.done: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if self.parser is None:
            return
        self._arrived_ns = now
        self.parser.feed_data(data)

    def connection_lost(self, error: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {error}"))

    def on_status(self, status: bytes) -> None:
        pass

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not self.first_ns:
            self.first_ns = self._arrived_ns
        events = body.count(b"data:")
        self.events += events
        client = self.client
        if client.window_from_ns <= self._arrived_ns < client.window_end_ns:
            client.window_events += events

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def exchange(self, request: bytes) -> tuple[int, int, int, int]:
        """(status, ns to first body byte, ns to the end, data events)."""
        assert self.transport is not None
        self.parser = httptools.HttpResponseParser(self)
        self.first_ns = 0
        self.events = 0
        self.done = asyncio.get_running_loop().create_future()
        self.sent_ns = time.perf_counter_ns()
        self.transport.write(request)
        await self.done
        end_ns = time.perf_counter_ns()
        return self.status, self.first_ns - self.sent_ns, end_ns - self.sent_ns, self.events


class LeanClient:
    def __init__(self, arguments: argparse.Namespace) -> None:
        self.arguments = arguments
        parts = urlsplit(arguments.url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.ttft_ns: list[int] = []
        self.e2e_ns: list[int] = []
        self.events = 0
        self.requests = 0
        self.errors = 0
        self.statuses: dict[int, int] = {}
        # What happened inside the measured window, whether or not its request ended in it: the
        # events that arrived and the requests that were sent (for rates and CPU per unit).
        self.window_from_ns = 0
        self.window_end_ns = 0
        self.window_events = 0
        self.window_requests = 0
        self.cpu_at_start: list[float] = []
        self.cpu_at_end: list[float] = []

    def request_bytes(self, stream_index: int) -> bytes:
        arguments = self.arguments
        prompt = arguments.prompt or f"stream {stream_index} " + "word " * arguments.prompt_words
        body: dict[str, object] = {
            "model": arguments.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": arguments.output_tokens,
            "stream": True,
        }
        data = orjson.dumps(body)
        key = os.environ.get("BENCH_API_KEY", "")
        head = f"POST {arguments.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
        head += "content-type: application/json\r\n"
        if key:
            head += f"authorization: Bearer {key}\r\n"
        head += f"content-length: {len(data)}\r\n\r\n"
        return head.encode() + data

    async def stream(self, index: int, start_ns: int, measure_from_ns: int, end_ns: int) -> None:
        loop = asyncio.get_running_loop()
        delay_s = (start_ns - time.perf_counter_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        request = self.request_bytes(index)
        connection: StreamConnection | None = None
        while time.perf_counter_ns() < end_ns:
            if connection is None or connection.lost.done():
                _, connection = await loop.create_connection(
                    lambda: StreamConnection(self), self.host, self.port
                )
            began_ns = time.perf_counter_ns()
            if measure_from_ns <= began_ns < end_ns:
                self.window_requests += 1
            try:
                status, first_ns, total_ns, events = await connection.exchange(request)
            except ConnectionError:
                self.errors += 1
                connection = None
                continue
            if began_ns < measure_from_ns or began_ns + total_ns > end_ns:
                continue
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status != 200:
                self.errors += 1
                continue
            self.requests += 1
            self.events += events
            self.ttft_ns.append(first_ns)
            self.e2e_ns.append(total_ns)
        if connection is not None and connection.transport is not None:
            connection.transport.close()

    async def run(self) -> dict[str, object]:
        arguments = self.arguments
        begin_ns = time.perf_counter_ns() + int(arguments.lead_s * 1e9)
        measure_from_ns = begin_ns + int(arguments.warmup_s * 1e9)
        end_ns = measure_from_ns + int(arguments.duration_s * 1e9)
        spread_ns = int(arguments.answer_s * 1e9) if arguments.start == "spread" else 0
        starts = [begin_ns + spread_ns * index // arguments.streams for index in range(arguments.streams)]
        self.window_from_ns, self.window_end_ns = measure_from_ns, end_ns
        pids = [int(pid) for pid in arguments.cpu_pids.split(",") if pid]
        loop = asyncio.get_running_loop()
        # The serving processes' CPU over exactly the measured window.
        loop.call_later(
            (measure_from_ns - time.perf_counter_ns()) / 1e9, self._read_cpu, pids, self.cpu_at_start
        )
        loop.call_later((end_ns - time.perf_counter_ns()) / 1e9, self._read_cpu, pids, self.cpu_at_end)
        usage_before = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.gather(
            *(self.stream(index, start, measure_from_ns, end_ns) for index, start in enumerate(starts))
        )
        usage_after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (usage_after.ru_utime + usage_after.ru_stime) - (
            usage_before.ru_utime + usage_before.ru_stime
        )
        return {
            "streams": arguments.streams,
            "start": arguments.start,
            "duration_s": arguments.duration_s,
            "requests": self.requests,
            "events": self.events,
            "errors": self.errors,
            "statuses": {str(status): count for status, count in self.statuses.items()},
            "ttft_ms": [value / 1e6 for value in self.ttft_ns],
            "e2e_ms": [value / 1e6 for value in self.e2e_ns],
            "client_cpu_s": cpu_s,
            "window_events": self.window_events,
            "window_requests": self.window_requests,
            "cpu_pids_s": [
                end - start for start, end in zip(self.cpu_at_start, self.cpu_at_end, strict=False)
            ],
        }

    @staticmethod
    def _read_cpu(pids: list[int], into: list[float]) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                into.append((int(fields[11]) + int(fields[12])) / ticks)
            except FileNotFoundError:
                into.append(0.0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="http://host:port (no /v1)")
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--model", default="ref")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=32)
    parser.add_argument("--prompt", default=None, help="The same prompt for every stream.")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--lead-s", type=float, default=0.5)
    parser.add_argument("--start", choices=("together", "spread"), default="spread")
    parser.add_argument(
        "--answer-s", type=float, default=0.3, help="One answer's duration (for spread starts)."
    )
    parser.add_argument("--json", required=True)
    parser.add_argument("--cpu-pids", default="", help="Processes whose CPU over the window is reported")
    arguments = parser.parse_args()
    result = uvloop.run(LeanClient(arguments).run())
    with open(arguments.json, "wb") as handle:
        handle.write(orjson.dumps(result))
    print(
        f"{result['requests']} requests, {result['events']} events, {result['errors']} errors",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
