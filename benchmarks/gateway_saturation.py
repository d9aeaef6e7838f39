"""The gateway's throughput against direct access at saturation, in one client, with its A/A control.

Two clients side by side (one through the gateway, one direct) split a saturated engine unevenly
even when both take the same path (0.77 to 1.20 between two identical clients of 128 streams on
vLLM, docs/field-tests/h200-2026-12-02.md section 2.2), so a cost of 2 % cannot be seen that way.
Here ONE closed-loop client runs N streams, and every request takes a label at random (balanced
in shuffled rounds, ``saturation_stats.LabelDeck``):

- ``gateway``: through modelyard's gateway (``--gateway-url``, the key from ``$BENCH_API_KEY``);
- ``direct-a`` and ``direct-b``: straight to the engine's port (``--direct-url``).

All three share the engine's conditions at every instant, so whatever the engine does over time
hits them alike; ``direct-a`` against ``direct-b`` is the A/A control of the same run. Per label:
output tokens per stream-second spent on its requests (sum of completion tokens / sum of request
durations: in a closed loop, the throughput per stream if every request took that path), TTFT
p50 and p99, requests. The ratios gateway / direct (a and b pooled) and direct-a / direct-b come
with 95 % intervals from a bootstrap over time blocks (``--block-s``; a request counts in the block
it started in), not over single requests, which are correlated.

Requests that start in the measured window are measured to their end (the streams stop starting
new ones at its end and finish what is in flight), so a slower label is not cut more often.
Prompts are distinct per request (a number, then random words), so an engine's prefix cache
favours no label; ``min_tokens`` = ``max_tokens`` and ``ignore_eos`` fix the output length
(``--no-fixed-output`` for an engine that refuses them). The client is one process on uvloop
and httptools (``lean_client.StreamConnection``); its CPU share is printed: near 100 % means
the client, not the path, may set the pace.

    BENCH_API_KEY=... python benchmarks/gateway_saturation.py --gateway-url http://127.0.0.1:8080 \\
        --direct-url http://127.0.0.1:41234 --gateway-model vllm --direct-model vllm \\
        --streams 256 --duration-s 120 --warmup-s 15 --json out.json
    python benchmarks/gateway_saturation.py --double --streams 64 --duration-s 30   # engine double

``--double``: modelyard serve (this checkout) with the exact-timing upstream
(``exact_upstream.py``) deployed behind it, both started here (``overhead_processes.Platform``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import uvloop
from lean_client import StreamConnection
from saturation_stats import LABELS, LabelDeck, RatioEstimate, RequestRecord, compare, label_figures

# Prompt words: common, one token each in most tokenizers.
WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education"
)
VOCABULARY = tuple(WORDS.split())
PATH_OF_LABEL = {"gateway": "gateway", "direct-a": "direct", "direct-b": "direct"}
USAGE_KEY = b'"completion_tokens":'


class WindowOff:
    """``StreamConnection`` counts events inside a window; this client counts its own (none here)."""

    window_from_ns = 0
    window_end_ns = 0
    window_events = 0


class UsageConnection(StreamConnection):
    """A keep-alive connection that also reads the completion tokens of the final usage chunk."""

    def __init__(self) -> None:
        super().__init__(WindowOff())
        self.completion_tokens = 0
        self._tail = b""

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        text = self._tail + body  # the key or its number may straddle two pieces
        at = text.rfind(USAGE_KEY)
        if at >= 0:
            digits = text[at + len(USAGE_KEY) :].lstrip()
            end = 0
            while end < len(digits) and 48 <= digits[end] <= 57:
                end += 1
            if end:
                self.completion_tokens = int(digits[:end])
        self._tail = body[-48:]

    async def exchange(self, request: bytes) -> tuple[int, int, int, int]:
        self.completion_tokens = 0
        self._tail = b""
        return await super().exchange(request)


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    model: str
    api_key: str

    @classmethod
    def of(cls, url: str, model: str, api_key: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise SystemExit(f"{url!r}: give http://HOST:PORT (no /v1; plain HTTP only)")
        return cls(parts.hostname, parts.port or 80, model, api_key)

    def request(self, prompt: str, output_tokens: int, fixed_output: bool) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if fixed_output:
            body |= {"min_tokens": output_tokens, "ignore_eos": True}
        data = orjson.dumps(body)
        head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
        head += "content-type: application/json\r\n"
        if self.api_key:
            head += f"authorization: Bearer {self.api_key}\r\n"
        head += f"content-length: {len(data)}\r\n\r\n"
        return head.encode() + data


class SaturationClient:
    def __init__(self, arguments: argparse.Namespace, targets: dict[str, Target]) -> None:
        self.arguments = arguments
        self.targets = targets
        self.deck = LabelDeck(LABELS, random.Random(arguments.seed))
        self.words = random.Random(arguments.seed + 1)
        self.sent = 0
        self.records: list[RequestRecord] = []
        self.failures: dict[str, int] = dict.fromkeys(LABELS, 0)
        self.statuses: dict[str, int] = {}
        self.events: dict[str, int] = dict.fromkeys(LABELS, 0)

    def prompt(self) -> str:
        self.sent += 1
        words = self.words.choices(VOCABULARY, k=self.arguments.prompt_words)
        return f"{self.sent} {self.words.getrandbits(48):012x} " + " ".join(words)

    async def stream(self, start_ns: int, measure_from_ns: int, end_ns: int) -> None:
        loop = asyncio.get_running_loop()
        delay_s = (start_ns - time.perf_counter_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        connections: dict[str, UsageConnection] = {}
        arguments = self.arguments
        while time.perf_counter_ns() < end_ns:
            label = self.deck.draw()
            path = PATH_OF_LABEL[label]
            target = self.targets[path]
            request = target.request(self.prompt(), arguments.output_tokens, arguments.fixed_output)
            connection = connections.get(path)
            if connection is None or connection.lost.done():
                _, connection = await loop.create_connection(UsageConnection, target.host, target.port)
                connections[path] = connection
            began_ns = time.perf_counter_ns()
            measured = began_ns >= measure_from_ns
            try:
                status, first_ns, total_ns, events = await connection.exchange(request)
            except ConnectionError:
                self.failures[label] += measured
                connections.pop(path, None)
                continue
            if not measured:
                continue
            self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
            if status != 200 or connection.completion_tokens <= 0:
                self.failures[label] += 1
                continue
            self.events[label] += events
            self.records.append(
                RequestRecord(
                    label=label,
                    started_s=(began_ns - measure_from_ns) / 1e9,
                    duration_s=total_ns / 1e9,
                    ttft_s=first_ns / 1e9,
                    completion_tokens=connection.completion_tokens,
                )
            )
        for connection in connections.values():
            if connection.transport is not None:
                connection.transport.close()

    async def run(self) -> dict[str, Any]:
        arguments = self.arguments
        begin_ns = time.perf_counter_ns() + int(0.2e9)
        measure_from_ns = begin_ns + int(arguments.warmup_s * 1e9)
        end_ns = measure_from_ns + int(arguments.duration_s * 1e9)
        ramp_ns = int(arguments.ramp_s * 1e9)
        starts = [begin_ns + ramp_ns * index // arguments.streams for index in range(arguments.streams)]
        cpu: list[float] = []
        wall: list[float] = []
        loop = asyncio.get_running_loop()
        for at_ns in (measure_from_ns, end_ns):
            loop.call_later((at_ns - time.perf_counter_ns()) / 1e9, self._read_cpu, cpu, wall)
        await asyncio.gather(*(self.stream(start, measure_from_ns, end_ns) for start in starts))
        drained_s = (time.perf_counter_ns() - end_ns) / 1e9
        return {
            "client_cpu_fraction": (cpu[1] - cpu[0]) / (wall[1] - wall[0]) if len(cpu) == 2 else None,
            "drain_s": drained_s,
        }

    @staticmethod
    def _read_cpu(cpu: list[float], wall: list[float]) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(usage.ru_utime + usage.ru_stime)
        wall.append(time.monotonic())


def estimate_json(estimate: RatioEstimate) -> dict[str, float | int]:
    return asdict(estimate)


def analyse(client: SaturationClient, extra: dict[str, Any]) -> dict[str, Any]:
    arguments = client.arguments
    records = client.records
    figures = {label: asdict(label_figures(records, label)) for label in LABELS}
    ratios: dict[str, list[dict[str, float | int]]] = {"gateway/direct": [], "direct-a/direct-b": []}
    for block_s in arguments.block_s:
        common = {"block_s": block_s, "window_s": arguments.duration_s, "samples": arguments.samples}
        gateway = compare(records, ("gateway",), ("direct-a", "direct-b"), seed=arguments.seed, **common)
        control = compare(records, ("direct-a",), ("direct-b",), seed=arguments.seed + 1, **common)
        ratios["gateway/direct"].append(estimate_json(gateway))
        ratios["direct-a/direct-b"].append(estimate_json(control))
    direct_tokens = sum(figures[label]["completion_tokens"] for label in ("direct-a", "direct-b"))
    direct_seconds = sum(figures[label]["request_seconds"] for label in ("direct-a", "direct-b"))
    settings = {key: value for key, value in vars(arguments).items() if key not in {"json", "requests_out"}}
    return {
        "settings": settings,
        "labels": figures,
        "direct_pooled_tokens_per_stream_s": direct_tokens / direct_seconds if direct_seconds else None,
        "ratios": ratios,
        "failures": client.failures,
        "statuses": client.statuses,
        "events": client.events,
        "requests_measured": len(records),
        "engine_tokens_per_s": sum(record.completion_tokens for record in records) / arguments.duration_s,
        **extra,
    }


def report(summary: dict[str, Any], target: float) -> None:
    labels = summary["labels"]
    print(
        f"\n{'label':9} {'requests':>8} {'tok/stream-s':>12} {'TTFT p50':>9} {'TTFT p99':>9} {'mean req':>9}"
    )
    for label in LABELS:
        row = labels[label]
        print(
            f"{label:9} {row['requests']:8} {row['tokens_per_stream_s']:12.2f} "
            f"{row['ttft_p50_s'] * 1e3:7.1f}ms {row['ttft_p99_s'] * 1e3:7.1f}ms "
            f"{row['duration_mean_s']:8.3f}s"
        )
    print()
    for name, estimates in summary["ratios"].items():
        for estimate in estimates:
            print(
                f"{name:17} {estimate['ratio']:.4f}  95 % interval {estimate['low']:.4f} to "
                f"{estimate['high']:.4f}  ({estimate['blocks']} blocks of {estimate['block_s']:g} s)"
            )
    gateway = summary["ratios"]["gateway/direct"][0]
    control = summary["ratios"]["direct-a/direct-b"][0]
    verdict = "met" if gateway["low"] >= target else ("not met" if gateway["high"] < target else "unresolved")
    print(
        f"\ntarget gateway/direct >= {target:g}: {verdict} (interval {gateway['low']:.4f} to "
        f"{gateway['high']:.4f}); A/A control {control['ratio']:.4f} "
        f"({'contains' if control['low'] <= 1 <= control['high'] else 'EXCLUDES'} 1)"
    )
    fraction = summary["client_cpu_fraction"] or 0.0
    failures = sum(summary["failures"].values())
    print(
        f"engine: {summary['engine_tokens_per_s']:.0f} output tok/s measured; "
        f"{summary['requests_measured']} requests, {failures} failed; client CPU {fraction:.0%} of one "
        f"core; the requests in flight at the end finished {summary['drain_s']:.1f} s later"
    )
    if fraction > 0.85:
        print(
            "warning: the client used most of its core; it may set the pace, not the paths", file=sys.stderr
        )


def write_requests(path: Path, records: list[RequestRecord]) -> None:
    lines = ["label,started_s,duration_s,ttft_s,completion_tokens"]
    lines += [
        f"{r.label},{r.started_s:.6f},{r.duration_s:.6f},{r.ttft_s:.6f},{r.completion_tokens}"
        for r in records
    ]
    path.write_bytes(lzma.compress(("\n".join(lines) + "\n").encode()))


@contextmanager
def engine_double(arguments: argparse.Namespace) -> Iterator[dict[str, Target]]:
    """modelyard serve and the exact upstream deployed behind it, on this machine."""
    from overhead_processes import Platform

    with tempfile.TemporaryDirectory(prefix="modelyard-gateway-saturation-") as scratch:
        workers = arguments.double_gateway_workers
        server = Platform(Path(scratch), gateway_workers=workers, cpus=arguments.double_proxy_cpus)
        try:
            server.start()
            options = f"--ttft-ms {arguments.double_ttft_ms:g} --itl-ms {arguments.double_itl_ms:g}"
            port = server.deploy("saturation", arguments.double_upstream_cpus, options)[0]
            print(f"engine double: gateway {server.url} ({workers} worker(s)), upstream port {port}")
            yield {
                "gateway": Target.of(server.url, "saturation", server.api_key),
                "direct": Target.of(f"http://127.0.0.1:{port}", "saturation", ""),
            }
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gateway-url", help="modelyard's server, http://HOST:PORT")
    parser.add_argument("--direct-url", help="the engine's own port, http://HOST:PORT")
    parser.add_argument("--gateway-model", help="the model name through the gateway (the deployment)")
    parser.add_argument("--direct-model", help="the engine's served model name (default: --gateway-model)")
    parser.add_argument("--streams", type=int, default=256, help="closed-loop streams (default 256)")
    parser.add_argument("--duration-s", type=float, default=60.0, help="measured seconds (default 60)")
    parser.add_argument("--warmup-s", type=float, default=10.0, help="seconds before measuring (default 10)")
    parser.add_argument("--ramp-s", type=float, default=3.0, help="the streams' starts spread over this")
    parser.add_argument("--prompt-words", type=int, default=250, help="words per prompt (~256 tokens)")
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument(
        "--no-fixed-output",
        dest="fixed_output",
        action="store_false",
        help="send no min_tokens / ignore_eos (answers may end early)",
    )
    parser.add_argument(
        "--block-s",
        type=lambda text: [float(value) for value in text.split(",")],
        default=[1.0, 5.0],
        help="time blocks of the bootstrap, seconds; several give one interval each (default 1,5)",
    )
    parser.add_argument("--samples", type=int, default=4000, help="bootstrap resamplings")
    parser.add_argument("--target", type=float, default=0.98, help="the gateway/direct target (issue 13)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--requests-out", type=Path, help="every measured request, CSV, xz-compressed")
    double = parser.add_argument_group("--double: the exact upstream behind modelyard serve, started here")
    double.add_argument("--double", action="store_true")
    double.add_argument("--double-ttft-ms", type=float, default=20.0)
    double.add_argument("--double-itl-ms", type=float, default=20.0)
    double.add_argument("--double-gateway-workers", type=int, default=1)
    double.add_argument("--double-proxy-cpus", default="0")
    double.add_argument("--double-upstream-cpus", default="1")
    arguments = parser.parse_args()
    if arguments.streams < 1 or arguments.duration_s <= 0:
        parser.error("--streams must be at least 1 and --duration-s positive")
    if not arguments.double and not (
        arguments.gateway_url and arguments.direct_url and arguments.gateway_model
    ):
        parser.error("give --gateway-url, --direct-url and --gateway-model (or --double)")
    with _targets(arguments) as targets:
        client = SaturationClient(arguments, targets)
        extra = uvloop.run(client.run())
    measured = {label: sum(record.label == label for record in client.records) for label in LABELS}
    if not all(measured.values()):
        print(
            f"error: a label has no measured request ({measured}); failures {client.failures}, "
            f"statuses {client.statuses}: check the URLs, the model names and the key",
            file=sys.stderr,
        )
        return 1
    summary = analyse(client, extra)
    report(summary, arguments.target)
    if arguments.json:
        arguments.json.write_text(json.dumps(summary, indent=2, default=str))
    if arguments.requests_out:
        write_requests(arguments.requests_out, client.records)
    return 0


@contextmanager
def _targets(arguments: argparse.Namespace) -> Iterator[dict[str, Target]]:
    if arguments.double:
        with engine_double(arguments) as targets:
            yield targets
        return
    key = os.environ.get("BENCH_API_KEY", "")
    yield {
        "gateway": Target.of(arguments.gateway_url, arguments.gateway_model, key),
        "direct": Target.of(arguments.direct_url, arguments.direct_model or arguments.gateway_model, ""),
    }


if __name__ == "__main__":
    sys.exit(main())
