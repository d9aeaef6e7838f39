"""How much load the modelyard bench client sustains on one core, as a ratio to `vllm bench serve`.

Both clients drive the same reference server (its own processes, on other cores) with the same
work: chat requests of 16 output tokens, one token per streamed chunk, near-constant arrivals
(gamma, shape 100). For each client the highest request rate it sustains is searched (doubling,
then bisecting): a rate holds when every request completes and the achieved request rate is at
least 90 % of the rate asked for. Both clients run pinned to the same single core.

    python benchmarks/bench_client_capacity.py --install-peer   # pip install vllm (~9 GB) into a temp venv
    python benchmarks/bench_client_capacity.py --peer-venv /tmp/peer-venv   # a venv where vllm imports

Prints one line per step, then the two sustained rates, the streamed chunks/s at those rates, and
the ratio (target: >= 1.5), with the machine they came from. ``--json FILE`` saves the figures.
Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODEL = "capacity-model"
SUSTAINED_FRACTION = 0.9


@dataclass
class Step:
    rate_per_s: float
    achieved_per_s: float
    chunks_per_s: float
    completed: int
    sent: int
    held: bool


@dataclass
class ClientCapacity:
    name: str
    max_rate_per_s: float | None = None
    chunks_per_s_at_max: float | None = None
    steps: list[Step] = field(default_factory=list)


def _pinned(cpu: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv]


def _run_ours(base_url: str, rate: float, count: int, cpu: str, output_tokens: int) -> Step:
    argv = [
        sys.executable,
        "-m",
        "modelyard.cli.main",
        "bench",
        "run",
        "--base-url",
        base_url,
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
        str(output_tokens),
        "--max-send-lag-ms",
        "1000000",
        "--no-server-metrics",
        "--no-gpus",
        "--json",
    ]
    completed = subprocess.run(_pinned(cpu, argv), capture_output=True, text=True, timeout=900)
    if completed.returncode not in (0, 1) or not completed.stdout.strip():
        raise RuntimeError(f"modelyard bench run failed: {completed.stderr[-2000:]}")
    point = json.loads(completed.stdout)["points"][0]
    itl_count = point["metrics"]["itl_ms"]["count"]
    window_s = point["measurement_duration_s"]
    chunks_per_s = (itl_count + point["requests_succeeded"]) / window_s if window_s else 0.0
    achieved = point["request_throughput_per_s"]
    held = point["requests_succeeded"] == count and achieved >= SUSTAINED_FRACTION * rate
    return Step(rate, achieved, chunks_per_s, point["requests_succeeded"], count, held)


def _run_peer(
    python: Path, base_url: str, tokenizer: Path, rate: float, count: int, cpu: str, output_tokens: int
) -> Step:
    with tempfile.TemporaryDirectory() as directory:
        argv = [
            str(python),
            "-m",
            "vllm.entrypoints.cli.main",
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            base_url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            MODEL,
            "--tokenizer",
            str(tokenizer),
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            str(output_tokens),
            "--num-prompts",
            str(count),
            "--request-rate",
            str(rate),
            "--burstiness",
            "100",
            "--ignore-eos",
            "--save-result",
            "--result-dir",
            directory,
            "--result-filename",
            "peer.json",
            "--disable-tqdm",
            "--seed",
            "0",
        ]
        completed = subprocess.run(
            _pinned(cpu, argv), capture_output=True, text=True, timeout=900, cwd=directory
        )
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


def _search(name: str, measure: object, start_rate: float, max_rate: float, seconds: float) -> ClientCapacity:
    capacity = ClientCapacity(name)
    assert callable(measure)

    def step(rate: float) -> Step:
        result: Step = measure(rate, max(50, int(rate * seconds)))
        capacity.steps.append(result)
        verdict = "held" if result.held else "NOT held"
        print(
            f"  {name:>9}: {rate:8.0f} req/s asked, {result.achieved_per_s:8.1f} done, "
            f"{result.chunks_per_s:9.0f} chunks/s, {result.completed}/{result.sent} ok: {verdict}",
            flush=True,
        )
        if result.held and (capacity.max_rate_per_s is None or rate > capacity.max_rate_per_s):
            capacity.max_rate_per_s = rate
            capacity.chunks_per_s_at_max = result.chunks_per_s
        return result

    low, high = 0.0, None
    rate = start_rate
    while rate <= max_rate:
        if step(rate).held:
            low = rate
            rate *= 2
        else:
            high = rate
            break
    if high is not None and low > 0:
        for _ in range(3):
            middle = (low + high) / 2
            if step(middle).held:
                low = middle
            else:
                high = middle
    return capacity


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
        "--server-workers", type=int, default=None, help="Server processes (default: its cores)."
    )
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each step, in seconds of load.")
    parser.add_argument("--start-rate", type=float, default=50.0)
    parser.add_argument("--max-rate", type=float, default=20000.0)
    parser.add_argument("--json", type=Path, default=None, help="Save the figures here.")
    arguments = parser.parse_args()

    cpu_count = os.cpu_count() or 1
    server_cpus = arguments.server_cpus or (f"1-{cpu_count - 1}" if cpu_count > 2 else "1")
    workers = arguments.server_workers or max(1, len(os.sched_getaffinity(0)) - 1)
    from modelyard.testing.tiny_model import build_tiny_qwen3

    with tempfile.TemporaryDirectory(prefix="modelyard-capacity-") as scratch:
        scratch_path = Path(scratch)
        tokenizer = build_tiny_qwen3(scratch_path / "tokenizer-model")
        python = (
            _install_peer(scratch_path / "peer")
            if arguments.install_peer
            else arguments.peer_venv / "bin" / "python"
        )
        port_file = scratch_path / "port"
        server = _start_server(
            server_cpus, workers, arguments.output_tokens, port_file, scratch_path / "server.log"
        )
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            base_url = f"http://127.0.0.1:{port_file.read_text()}"
            print(
                f"reference server {base_url}: {workers} processes on cores {server_cpus}; clients on core "
                f"{arguments.client_cpu}",
                flush=True,
            )
            tokens = arguments.output_tokens

            def ours(rate: float, count: int) -> Step:
                return _run_ours(base_url, rate, count, arguments.client_cpu, tokens)

            def theirs(rate: float, count: int) -> Step:
                return _run_peer(python, base_url, tokenizer, rate, count, arguments.client_cpu, tokens)

            mine = _search("modelyard", ours, arguments.start_rate, arguments.max_rate, arguments.seconds)
            peer_capacity = _search(
                "vllm", theirs, arguments.start_rate, arguments.max_rate, arguments.seconds
            )
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)

    ratio = None
    if mine.max_rate_per_s and peer_capacity.max_rate_per_s:
        ratio = mine.max_rate_per_s / peer_capacity.max_rate_per_s
    chunk_ratio = None
    if mine.chunks_per_s_at_max and peer_capacity.chunks_per_s_at_max:
        chunk_ratio = mine.chunks_per_s_at_max / peer_capacity.chunks_per_s_at_max
    machine = f"{platform.processor() or platform.machine()}, {cpu_count} cores, {platform.platform()}"
    print(f"machine: {machine}")
    print(f"modelyard: {mine.max_rate_per_s} req/s sustained, {mine.chunks_per_s_at_max} chunks/s")
    peer_chunks = peer_capacity.chunks_per_s_at_max
    print(f"vllm bench serve: {peer_capacity.max_rate_per_s} req/s sustained, {peer_chunks} chunks/s")
    print(
        f"ratio (request rate): {ratio if ratio is None else round(ratio, 2)} (target >= 1.5); "
        f"chunks/s ratio: {chunk_ratio if chunk_ratio is None else round(chunk_ratio, 2)}"
    )
    if arguments.json is not None:
        arguments.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "client_cpu": arguments.client_cpu,
                    "server_cpus": server_cpus,
                    "server_workers": workers,
                    "output_tokens": arguments.output_tokens,
                    "ratio": ratio,
                    "chunk_ratio": chunk_ratio,
                    "modelyard": asdict(mine),
                    "vllm": asdict(peer_capacity),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
