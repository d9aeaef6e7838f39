"""How much load the modelyard bench client sustains on one core, as a ratio to `vllm bench serve`.

Both clients drive the same reference server with the same work: chat requests of 16 output
tokens, one token per streamed chunk, near-constant arrivals (gamma, shape 100). Both run pinned
to the same single core (``taskset``); the server runs on the other cores. Two figures:

1. **Client CPU per request** at a common rate both sustain (``--cpu-rate``): the client's CPU
   time (``/proc/PID/stat``) over a window in the middle of the load, divided by the requests the
   server completed in that window (its ``vllm:request_success_total``). ``1e6 / µs per request``
   is the rate one core could carry; it does not depend on the server's speed.
2. **Highest sustained rate** found by search (doubling, then bisecting): a rate holds when every
   request completes and the achieved rate is at least 90 % of the rate asked for. This one is
   capped by the server where the server is slower than both clients (it says so).

    python benchmarks/bench_client_capacity.py --install-peer   # pip install vllm (~9 GB), temp venv
    python benchmarks/bench_client_capacity.py --peer-venv /tmp/peer-venv   # vllm imports there

``--json FILE`` saves the figures. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import venv
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODEL = "capacity-model"
SUSTAINED_FRACTION = 0.9
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class Step:
    rate_per_s: float
    achieved_per_s: float
    chunks_per_s: float
    completed: int
    sent: int
    held: bool


@dataclass
class ClientFigures:
    name: str
    cpu_us_per_request: float | None = None
    cpu_utilization_at_rate: float | None = None
    max_rate_per_s: float | None = None
    chunks_per_s_at_max: float | None = None
    steps: list[Step] = field(default_factory=list)


@dataclass
class Setup:
    base_url: str
    client_cpu: str
    output_tokens: int
    tokenizer: Path
    peer_python: Path


def _pinned(cpu: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv]


def our_argv(setup: Setup, rate: float, count: int) -> list[str]:
    return _pinned(
        setup.client_cpu,
        [
            sys.executable,
            "-m",
            "modelyard.cli.main",
            "bench",
            "run",
            "--base-url",
            setup.base_url,
            "--model",
            MODEL,
            "--request-rate",
            str(rate),
            "--arrival",
            "gamma",
            "--burstiness",
            "100",
            "--num-requests",
            str(count),
            "--input-tokens",
            "16",
            "--output-tokens",
            str(setup.output_tokens),
            "--max-send-lag-ms",
            "1000000",
            "--no-server-metrics",
            "--no-gpus",
            "--json",
        ],
    )


def peer_argv(setup: Setup, rate: float, count: int, result_dir: str) -> list[str]:
    return _pinned(
        setup.client_cpu,
        [
            str(setup.peer_python),
            "-m",
            "vllm.entrypoints.cli.main",
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            setup.base_url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            MODEL,
            "--tokenizer",
            str(setup.tokenizer),
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            str(setup.output_tokens),
            "--num-prompts",
            str(count),
            "--request-rate",
            str(rate),
            "--burstiness",
            "100",
            "--ignore-eos",
            "--save-result",
            "--result-dir",
            result_dir,
            "--result-filename",
            "peer.json",
            "--disable-tqdm",
            "--seed",
            "0",
        ],
    )


def _run_ours(setup: Setup, rate: float, count: int) -> Step:
    completed = subprocess.run(our_argv(setup, rate, count), capture_output=True, text=True, timeout=900)
    if completed.returncode not in (0, 1) or not completed.stdout.strip():
        raise RuntimeError(f"modelyard bench run failed: {completed.stderr[-2000:]}")
    point = json.loads(completed.stdout)["points"][0]
    window_s = point["measurement_duration_s"]
    chunks = point["metrics"]["itl_ms"]["count"] + point["requests_succeeded"]
    achieved = point["request_throughput_per_s"]
    held = point["requests_succeeded"] == count and achieved >= SUSTAINED_FRACTION * rate
    return Step(
        rate, achieved, chunks / window_s if window_s else 0.0, point["requests_succeeded"], count, held
    )


def _run_peer(setup: Setup, rate: float, count: int) -> Step:
    with tempfile.TemporaryDirectory() as directory:
        argv = peer_argv(setup, rate, count, directory)
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=directory)
        result_path = Path(directory) / "peer.json"
        if not result_path.exists():
            raise RuntimeError(
                f"vllm bench serve failed: {completed.stdout[-1500:]} {completed.stderr[-1500:]}"
            )
        result = json.loads(result_path.read_text())
    achieved = result["request_throughput"]
    # One token per chunk on the reference server: output tokens/s is chunks/s.
    chunks_per_s = result["total_output_tokens"] / result["duration"] if result["duration"] else 0.0
    held = result["completed"] == count and achieved >= SUSTAINED_FRACTION * rate
    return Step(rate, achieved, chunks_per_s, result["completed"], count, held)


def _search(
    figures: ClientFigures, measure: Callable[[float, int], Step], arguments: argparse.Namespace
) -> None:
    def step(rate: float) -> bool:
        result = measure(rate, max(50, int(rate * arguments.seconds)))
        figures.steps.append(result)
        print(
            f"  {figures.name:>9}: {rate:8.0f} req/s asked, {result.achieved_per_s:8.1f} done, "
            f"{result.chunks_per_s:9.0f} chunks/s, {result.completed}/{result.sent} ok: "
            f"{'held' if result.held else 'NOT held'}",
            flush=True,
        )
        if result.held and (figures.max_rate_per_s is None or rate > figures.max_rate_per_s):
            figures.max_rate_per_s = rate
            figures.chunks_per_s_at_max = result.chunks_per_s
        return result.held

    low, high, rate = 0.0, None, arguments.start_rate
    while rate <= arguments.max_rate:
        if not step(rate):
            high = rate
            break
        low, rate = rate, rate * 2
    if high is not None and low > 0:
        for _ in range(3):
            middle = (low + high) / 2
            if step(middle):
                low = middle
            else:
                high = middle


def _successes(metrics_url: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    match = re.search(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def _cpu_per_request(
    figures: ClientFigures, argv: list[str], metrics_url: str, window_s: float, cwd: str
) -> None:
    """Client CPU over a window in the middle of the load, per request the server completed in it."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    try:
        baseline = _successes(metrics_url)
        deadline = time.monotonic() + 300
        while (
            _successes(metrics_url) < baseline + 20 and time.monotonic() < deadline and process.poll() is None
        ):
            time.sleep(0.05)
        time.sleep(0.5)
        cpu_start, done_start, at_start = _cpu_s(process.pid), _successes(metrics_url), time.monotonic()
        time.sleep(window_s)
        cpu_end, done_end, at_end = _cpu_s(process.pid), _successes(metrics_url), time.monotonic()
        process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    requests = done_end - done_start
    figures.cpu_us_per_request = (cpu_end - cpu_start) / requests * 1e6 if requests else None
    figures.cpu_utilization_at_rate = (cpu_end - cpu_start) / (at_end - at_start)
    print(
        f"  {figures.name:>9}: {figures.cpu_us_per_request:.0f} µs CPU per request, "
        f"{figures.cpu_utilization_at_rate:.0%} of a core over {requests:.0f} requests",
        flush=True,
    )


def _install_peer(directory: Path) -> Path:
    print(f"installing vllm into a throwaway virtualenv at {directory} (several GB, minutes)", flush=True)
    venv.create(directory, with_pip=True)
    python = directory / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "vllm"], check=True)
    return python


def _start_server(
    cpus: str, workers: int, output_tokens: int, port_file: Path, log: Path
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "modelyard.bench.reference_server",
        "--flavor",
        "vllm",
        "--model-path",
        MODEL,
        "--served-model-name",
        MODEL,
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
        "--output-tokens",
        str(output_tokens),
        "--max-concurrency",
        "100000",
        "--kv-cache-tokens",
        "1000000000",
        "--workers",
        str(workers),
    ]
    with log.open("wb") as stream:
        return subprocess.Popen(
            _pinned(cpus, argv), stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
        )


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 2) if ours and theirs else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    peer = parser.add_mutually_exclusive_group(required=True)
    peer.add_argument("--peer-venv", type=Path, help="A virtualenv where `import vllm` works.")
    peer.add_argument("--install-peer", action="store_true", help="pip install vllm into a temporary venv.")
    parser.add_argument("--client-cpu", default="0", help="The one core both clients run on.")
    parser.add_argument(
        "--server-cpus", default=None, help="Cores for the reference server (default: the rest)."
    )
    parser.add_argument(
        "--server-workers", type=int, default=1, help="Server processes (/metrics is per process)."
    )
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument(
        "--cpu-rate", type=float, default=500.0, help="The common rate of the CPU measurement."
    )
    parser.add_argument("--cpu-window-s", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each search step, in seconds.")
    parser.add_argument("--start-rate", type=float, default=100.0)
    parser.add_argument("--max-rate", type=float, default=20000.0)
    parser.add_argument("--no-search", action="store_true", help="Only the CPU measurement.")
    parser.add_argument("--json", type=Path, default=None, help="Save the figures here.")
    arguments = parser.parse_args()

    cpu_count = os.cpu_count() or 1
    server_cpus = arguments.server_cpus or (f"1-{cpu_count - 1}" if cpu_count > 2 else "1")
    from modelyard.testing.tiny_model import build_tiny_qwen3

    mine, theirs = ClientFigures("modelyard"), ClientFigures("vllm")
    with tempfile.TemporaryDirectory(prefix="modelyard-capacity-") as scratch:
        scratch_path = Path(scratch)
        tokenizer = build_tiny_qwen3(scratch_path / "tokenizer-model")
        peer_python = (
            _install_peer(scratch_path / "peer")
            if arguments.install_peer
            else arguments.peer_venv / "bin" / "python"
        )
        port_file = scratch_path / "port"
        server = _start_server(
            server_cpus,
            arguments.server_workers,
            arguments.output_tokens,
            port_file,
            scratch_path / "server.log",
        )
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            base_url = f"http://127.0.0.1:{port_file.read_text()}"
            setup = Setup(base_url, arguments.client_cpu, arguments.output_tokens, tokenizer, peer_python)
            print(
                f"reference server {base_url}: {arguments.server_workers} process(es) on cores "
                f"{server_cpus}; clients on core {arguments.client_cpu}",
                flush=True,
            )
            rate = arguments.cpu_rate
            count = int(rate * (arguments.cpu_window_s + 4))
            print(f"client CPU at {rate:g} req/s:", flush=True)
            _cpu_per_request(
                mine, our_argv(setup, rate, count), base_url + "/metrics", arguments.cpu_window_s, scratch
            )
            _cpu_per_request(
                theirs,
                peer_argv(setup, rate, count, scratch),
                base_url + "/metrics",
                arguments.cpu_window_s,
                scratch,
            )
            if not arguments.no_search:
                print("highest sustained rate:", flush=True)
                _search(mine, lambda r, n: _run_ours(setup, r, n), arguments)
                _search(theirs, lambda r, n: _run_peer(setup, r, n), arguments)
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)

    machine = f"{platform.machine()}, {cpu_count} cores ({platform.platform()})"
    cpu_ratio = _ratio(theirs.cpu_us_per_request, mine.cpu_us_per_request)
    rate_ratio = _ratio(mine.max_rate_per_s, theirs.max_rate_per_s)
    chunk_ratio = _ratio(mine.chunks_per_s_at_max, theirs.chunks_per_s_at_max)
    print(f"machine: {machine}")
    for figures in (mine, theirs):
        cpu_us = figures.cpu_us_per_request
        per_core = round(1e6 / cpu_us) if cpu_us else None
        chunks = round(figures.chunks_per_s_at_max) if figures.chunks_per_s_at_max else None
        print(
            f"{figures.name}: {cpu_us and round(cpu_us)} µs CPU/request (~{per_core} req/s per core); "
            f"sustained {figures.max_rate_per_s} req/s, {chunks} chunks/s"
        )
    print(f"ratio by client CPU per request: {cpu_ratio} (target >= 1.5)")
    print(f"ratio by sustained rate: {rate_ratio}; by chunks/s: {chunk_ratio}")
    if rate_ratio is not None and rate_ratio < 1.2 and cpu_ratio and cpu_ratio > 1.2:
        print(
            "note: both clients stopped near the same rate: the reference server, not a client, set that "
            "limit (give it more cores with --server-cpus/--server-workers)"
        )
    if arguments.json is not None:
        arguments.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "client_cpu": arguments.client_cpu,
                    "server_cpus": server_cpus,
                    "server_workers": arguments.server_workers,
                    "output_tokens": arguments.output_tokens,
                    "cpu_rate_per_s": arguments.cpu_rate,
                    "ratio_cpu_per_request": cpu_ratio,
                    "ratio_sustained_rate": rate_ratio,
                    "ratio_chunks_per_s": chunk_ratio,
                    "modelyard": asdict(mine),
                    "vllm": asdict(theirs),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
