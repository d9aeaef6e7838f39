"""What the gateway costs a stream, as ratios to the engine reached directly, on this machine's CPU.

The H200 field run's gateway-cost measurement, with the project's engine double (the reference
server playing vLLM, deployed as a custom backend) in place of vLLM. Everything goes through
modelyard's own CLI, as a user would: ``modelyard serve`` in a temporary data directory, the tiny
Qwen3 added and deployed, an API key made, and ``modelyard bench run`` clients on loopback HTTP.

For each ``--streams`` value, two clients run **side by side**, started together with
``--start-at``, each with that many streams:

1. **gateway vs direct** (the measurement): one client through the gateway (``/v1`` of the
   server), one at the engine's own port. Run one after the other, the two paths would also
   differ by whatever the engine did between the runs; side by side, both halves share the
   engine's batches and the machine's load, so what differs between them is the gateway.
2. **direct vs direct** (the A/A control): two identical clients at the engine. Their ratio
   shows how far the method itself is from 1 here; read the measurement against it.

Figures per client: output tokens/s and TTFT p50 (``result.json``). Per pair: A/B and A−B. For
the gateway pair also the server process's CPU time (``/proc/PID/stat``) over the pair, per
chunk the gateway client received (``requests.jsonl``), and ``1e6 / µs per chunk``: the chunks
per second one core could relay. The project's targets: throughput ratio >= 0.98 and added TTFT
p50 <= 1 ms.

    python benchmarks/gateway_overhead.py
    python benchmarks/gateway_overhead.py --streams 8 --duration-s 30 --json /tmp/overhead.json

``--json FILE`` saves the figures. Takes a few minutes; never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import httpx
from rich import box
from rich.console import Console
from rich.table import Table

from modelyard.bench.records import RunResult

DEPLOYMENT = "ref"
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
TARGET_RATIO = 0.98
TARGET_ADDED_TTFT_MS = 1.0
WARMUP_S = 2.0
BACKEND_YAML = """\
backend_name: vllm-double
description: the reference server playing vLLM (a test double)
health_check_path: /health
modelyard:
  family: vllm
version_configs:
  "1.0":
    run_command: {python} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}} \
--host {{{{worker_ip}}}} --port {{{{port}}}} --served-model-name {{{{model_name}}}} \
--reasoning-tokens 100000 --itl-ms {itl_ms} --ttft-ms {ttft_ms} --tokens-per-chunk 2
    custom_framework: cpu
"""

PathKind = Literal["gateway", "direct"]
PAIRS: tuple[tuple[PathKind, PathKind], ...] = (("gateway", "direct"), ("direct", "direct"))

output = Console()
errors = Console(stderr=True)


class SetupFailed(Exception):
    """The platform or the deployment could not be brought up; the message says what to look at."""


@dataclass
class ClientFigures:
    path: PathKind
    output_tokens_per_s: float | None
    ttft_p50_ms: float | None
    chunks: int
    valid: bool
    started_late: bool


@dataclass
class PairFigures:
    streams: int
    a: ClientFigures
    b: ClientFigures
    server_cpu_s: float
    """The ``modelyard serve`` process's CPU time over the pair (both halves, lead time included)."""

    @property
    def name(self) -> str:
        control = " (A/A)" if self.a.path == self.b.path else ""
        return f"{self.a.path}/{self.b.path}{control}"

    @property
    def ratio(self) -> float | None:
        a, b = self.a.output_tokens_per_s, self.b.output_tokens_per_s
        return a / b if a and b else None

    @property
    def ttft_added_ms(self) -> float | None:
        a, b = self.a.ttft_p50_ms, self.b.ttft_p50_ms
        return a - b if a is not None and b is not None else None

    @property
    def gateway_cpu_us_per_chunk(self) -> float | None:
        if self.a.path != "gateway" or not self.a.chunks:
            return None
        return self.server_cpu_s / self.a.chunks * 1e6


class ModelyardServer:
    """A ``modelyard serve`` of its own (data directory, port, session), driven through the CLI."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        overrides = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
        overrides |= {"MODELYARD_URL": self.url, "MODELYARD_DATA_DIR": str(data_dir)}
        inherited = {key: value for key, value in os.environ.items() if key != "MODELYARD_BENCH_API_KEY"}
        self.environment = inherited | overrides
        self.log_path = data_dir / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.deployed = False
        """Whether a deployment may exist, to remove on the way out."""

    def start(self, timeout_s: float = 120.0) -> None:
        argv = ["serve", "--no-demo", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "modelyard.cli.main", *argv, "--host", "127.0.0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SetupFailed(f"modelyard serve exited ({self.process.returncode}): {self._log_tail()}")
            if self._answers():
                return
            time.sleep(0.3)
        raise SetupFailed(f"modelyard serve did not answer within {timeout_s:.0f} s: {self._log_tail()}")

    def _answers(self) -> bool:
        password_file = self.data_dir / "admin-password"
        if not password_file.exists():
            return False
        auth = ("admin", password_file.read_text().strip())
        try:
            return httpx.get(f"{self.url}/api/v1/system", auth=auth, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-1500:] if self.log_path.exists() else "(no log)"

    def cli(self, *arguments: str, timeout_s: float = 300.0, check: bool = True) -> str:
        """``modelyard ARGUMENTS``'s stdout; ``SetupFailed`` with its stderr when it fails (``check``)."""
        argv = [sys.executable, "-m", "modelyard.cli.main", *arguments]
        completed = subprocess.run(
            argv, capture_output=True, text=True, env=self.environment, timeout=timeout_s, check=False
        )
        if not check:
            return completed.stdout + completed.stderr
        if completed.returncode != 0:
            raise SetupFailed(
                f"`modelyard {shlex.join(arguments)}` exited {completed.returncode}: "
                f"{completed.stderr.strip()[-1500:]}"
            )
        return completed.stdout

    def stop(self) -> None:
        """Remove the deployment (its engine stops), then SIGTERM the server's session."""
        if self.deployed:
            try:
                self.cli("rm", DEPLOYMENT, "--wait", timeout_s=120)
            except (SetupFailed, subprocess.TimeoutExpired) as error:
                errors.print(f"warning: could not remove {DEPLOYMENT}: {error}", highlight=False)
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def deploy(server: ModelyardServer, scratch: Path, arguments: argparse.Namespace) -> int:
    """Model, backend and deployment; the running engine's port."""
    from modelyard.testing.tiny_model import build_tiny_qwen3

    model_dir = build_tiny_qwen3(scratch / "tiny-qwen3")
    server.cli("models", "add", str(model_dir), "--name", "tiny")
    backend_file = scratch / "vllm-double.yaml"
    python = shlex.quote(sys.executable)
    backend_file.write_text(
        BACKEND_YAML.format(python=python, itl_ms=arguments.itl_ms, ttft_ms=arguments.ttft_ms)
    )
    server.cli("backends", "import", str(backend_file))
    server.deployed = True
    try:
        server.cli("deploy", "tiny", "--name", DEPLOYMENT, "--backend", "vllm-double", "--skip-verification")
    except SetupFailed as error:
        log = server.cli("logs", DEPLOYMENT, "--tail", "30", check=False)
        raise SetupFailed(
            f"{error}\nthe engine's log (`modelyard logs {DEPLOYMENT}`) ends:\n{log}"
        ) from error
    state = json.loads(server.cli("ps", DEPLOYMENT, "--json"))
    for instance in state.get("instances", []):
        if instance.get("state") == "running" and instance.get("port"):
            return int(instance["port"])
    raise SetupFailed(f"{DEPLOYMENT} has no running instance: see `modelyard ps {DEPLOYMENT}`")


@dataclass
class Setup:
    server: ModelyardServer
    engine_port: int
    api_key: str
    runs_dir: Path
    arguments: argparse.Namespace


def run_pair(
    setup: Setup, paths: tuple[PathKind, PathKind], streams: int, seeds: tuple[int, int]
) -> PairFigures:
    """Two ``modelyard bench run`` clients, started together; their figures."""
    server, arguments = setup.server, setup.arguments
    assert server.process is not None
    start_at = time.time() + arguments.lead_s
    cpu_before_s = _cpu_s(server.process.pid)
    clients: list[tuple[PathKind, Path, subprocess.Popen[bytes]]] = []
    try:
        for index, (path, seed) in enumerate(zip(paths, seeds, strict=True)):
            out = setup.runs_dir / f"c{streams}-{paths[0]}-{paths[1]}-{index}-{path}"
            out.mkdir(parents=True)
            base_url = f"{server.url}/v1" if path == "gateway" else f"http://127.0.0.1:{setup.engine_port}/v1"
            argv = ["bench", "run", "--base-url", base_url, "--model", DEPLOYMENT]
            argv += ["--concurrency", str(streams), "--duration-s", str(arguments.duration_s)]
            argv += ["--warmup-s", str(WARMUP_S), "--input-tokens", "64", "--output-tokens", "128"]
            argv += ["--no-gpus", "--no-server-metrics", "--seed", str(seed), "--out", str(out), "--json"]
            argv += ["--start-at", f"{start_at:.3f}"]
            environment = dict(server.environment)
            if path == "gateway":
                environment["MODELYARD_BENCH_API_KEY"] = setup.api_key  # never on a command line
            with (out / "stdout.json").open("wb") as stdout, (out / "stderr.txt").open("wb") as stderr:
                process = subprocess.Popen(
                    [sys.executable, "-m", "modelyard.cli.main", *argv],
                    stdout=stdout,
                    stderr=stderr,
                    env=environment,
                )
            clients.append((path, out, process))
        for _, _, process in clients:
            process.wait(timeout=arguments.lead_s + WARMUP_S + arguments.duration_s + 300)
    finally:
        for _, _, process in clients:
            if process.poll() is None:
                process.kill()
                process.wait()
    server_cpu_s = _cpu_s(server.process.pid) - cpu_before_s
    a, b = (_client_figures(path, out, process.returncode) for path, out, process in clients)
    pair = PairFigures(streams, a, b, server_cpu_s)
    if a.started_late or b.started_late:
        errors.print(
            f"warning: a client started late ({streams} streams, {pair.name}), so the halves overlap "
            f"less: give a larger --lead-s than {arguments.lead_s:g}",
            highlight=False,
        )
    return pair


def _client_figures(path: PathKind, out: Path, exit_code: int) -> ClientFigures:
    stderr_text = (out / "stderr.txt").read_text(errors="replace")
    result_path = out / "result.json"
    if not result_path.exists():
        raise SetupFailed(f"bench run ({path}) exited {exit_code} without a result: {stderr_text[-1500:]}")
    result = RunResult.from_json(result_path.read_text())
    point = result.points[0]
    chunks = 0
    with (out / "requests.jsonl").open() as requests:
        for line in requests:
            chunks += len(json.loads(line)["chunk_arrival_ns"])
    if not result.valid:
        errors.print(f"warning: the {path} client's run is invalid: {result.invalid_reason}", highlight=False)
    return ClientFigures(
        path=path,
        output_tokens_per_s=point.output_token_throughput_per_s,
        ttft_p50_ms=point.metrics["ttft_ms"].median,
        chunks=chunks,
        valid=result.valid,
        started_late="starts late" in stderr_text,
    )


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(streams: int, pairs: list[PairFigures]) -> None:
    table = Table(title=f"{streams} stream(s) per client, side by side", box=box.SIMPLE_HEAD)
    table.add_column("A vs B", no_wrap=True)
    for column in ("A tok/s", "B tok/s", "A/B", "TTFT A\np50 ms", "TTFT B\np50 ms", "TTFT\nA−B ms"):
        table.add_column(column, justify="right")
    for pair in pairs:
        a, b = pair.a, pair.b
        ttft = (a.ttft_p50_ms, b.ttft_p50_ms, pair.ttft_added_ms)
        table.add_row(
            pair.name,
            _number(a.output_tokens_per_s, 1),
            _number(b.output_tokens_per_s, 1),
            _number(pair.ratio, 3),
            *(_number(value, 2) for value in ttft),
        )
    output.print(table)
    gateway = next(pair for pair in pairs if pair.a.path == "gateway")
    control = next(pair for pair in pairs if pair.a.path == pair.b.path)
    per_chunk_us = gateway.gateway_cpu_us_per_chunk
    if per_chunk_us:
        output.print(
            f"gateway CPU: {per_chunk_us:,.1f} µs per relayed chunk ({gateway.server_cpu_s:.2f} s of "
            f"modelyard serve over {gateway.a.chunks:,} chunks); 1e6 / µs per chunk = "
            f"{1e6 / per_chunk_us:,.0f} chunks/s one core could relay. Over the A/A pair (no gateway "
            f"traffic) the server used {control.server_cpu_s:.2f} s.",
            highlight=False,
        )


def measure(scratch: Path, arguments: argparse.Namespace) -> list[PairFigures]:
    server = ModelyardServer(scratch / "data")
    server.data_dir.mkdir()
    try:
        server.start()
        errors.print(f"modelyard serve on {server.url}; building and deploying the tiny model", style="dim")
        api_key = str(json.loads(server.cli("keys", "create", "bench", "--json"))["key"])
        setup = Setup(server, deploy(server, scratch, arguments), api_key, scratch / "runs", arguments)
        figures: list[PairFigures] = []
        for streams in arguments.streams:
            pairs: list[PairFigures] = []
            for paths in PAIRS:
                errors.print(f"{streams} stream(s) per client: {paths[0]}/{paths[1]}", style="dim")
                seed = 100 + 2 * len(figures) + 2 * len(pairs)  # own prompts per client: no cache hits
                pairs.append(run_pair(setup, paths, streams, (seed, seed + 1)))
            print_table(streams, pairs)
            figures += pairs
        return figures
    finally:
        server.stop()


def _streams(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--streams takes integers like 1,8,32, got {text!r}") from error
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--streams takes positive integers like 1,8,32, got {text!r}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=_streams, default=[1, 8, 32], help="Streams per client: 1,8,32.")
    parser.add_argument("--duration-s", type=float, default=15.0, help="Measured seconds per client.")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="The engine double's inter-token time.")
    parser.add_argument(
        "--ttft-ms", type=float, default=20.0, help="The engine double's time to first token."
    )
    parser.add_argument(
        "--lead-s", type=float, default=6.0, help="Seconds between launching a pair and its agreed start."
    )
    parser.add_argument("--json", type=Path, default=None, help="Save the figures here.")
    arguments = parser.parse_args()

    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="modelyard-gateway-overhead-") as scratch:
            figures = measure(Path(scratch), arguments)
    except SetupFailed as error:
        errors.print(f"[red]error:[/red] {error}", highlight=False)
        return 1
    except KeyboardInterrupt:
        errors.print("interrupted; the server and its engine were stopped")
        return 130
    machine = f"{platform.machine()}, {os.cpu_count()} cores ({platform.platform()})"
    output.print(
        f"machine: {machine}; {time.monotonic() - started:.0f} s in all. Targets: gateway/direct "
        f">= {TARGET_RATIO}, added TTFT p50 <= {TARGET_ADDED_TTFT_MS:g} ms; the A/A rows show the "
        "method's own spread.",
        highlight=False,
    )
    if arguments.json is not None:
        settings = {key: value for key, value in vars(arguments).items() if key != "json"}
        pairs = [
            {
                **asdict(pair),
                "pair": pair.name,
                "ratio": pair.ratio,
                "ttft_added_ms": pair.ttft_added_ms,
                "gateway_cpu_us_per_chunk": pair.gateway_cpu_us_per_chunk,
            }
            for pair in figures
        ]
        document = {"machine": machine, "settings": settings, "pairs": pairs}
        arguments.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
