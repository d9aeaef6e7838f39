"""The field run's step for the gateway's throughput at saturation (issue 13's H200 point).

``gateway-saturation NAME --streams N``: ``benchmarks/gateway_saturation.py`` against a running
deployment: one closed-loop client whose requests take ``gateway``, ``direct-a`` or ``direct-b``
at random, so the ratio gateway/direct and its A/A control come from the same run. Beside it, the
engine's own /metrics (running and waiting requests) and the GPU's utilization, every second.
``field_run.py`` registers it; it appends what it saw to ``RESULTS/steps.jsonl`` and returns False
when the benchmark did not finish or a label got no requests.

``gateway-scaling``: the field server stopped (its engines removed first, by the phase), then
``benchmarks/gateway_overhead.py`` with 1, 2 and 4 gateway workers pinned to CPUs 0-3 and the
load on 8-15: whether N workers relay 0.8 N times one worker's chunks per second on real cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from field_common import (
    DATA,
    RESULTS,
    SERVER,
    api_key,
    deployment,
    engine_host,
    engine_metrics_url,
    record,
    running_instance,
)

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "gateway_saturation.py"
OVERHEAD = ROOT / "benchmarks" / "gateway_overhead.py"
# The scaling figures of issue 13 (N workers relay >= 0.8 N times one worker's chunks/s): 256
# streams with spread starts, 1, 2 and 4 workers on CPUs 0-3, the load on 8-15.
SCALING_ARGS = (
    "--scenarios 256-spread --workers 1,2,4 --no-litellm --rounds 1 --duration-s 8 --warmup-s 2 "
    "--proxy-cpus 0 --load-cpus 8-15 --all-cpus 0-3"
)
ENGINE_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
}


class Sampler(threading.Thread):
    """Every second: the engine's running and waiting requests, and the GPU's utilization."""

    def __init__(self, metrics_url: str | None, gpu_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.metrics_url = metrics_url
        self.gpu_ids = gpu_ids
        self.samples: list[dict[str, float]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopped.wait(1.0):
            sample: dict[str, float] = {"at_s": round(time.monotonic() - started, 2)}
            if self.metrics_url:
                try:
                    text = httpx.get(self.metrics_url, timeout=2).text
                except httpx.HTTPError:
                    text = ""
                for line in text.splitlines():
                    name = line.split("{", 1)[0].split(" ", 1)[0]
                    if name in ENGINE_GAUGES:
                        key = ENGINE_GAUGES[name]
                        sample[key] = sample.get(key, 0.0) + float(line.rsplit(" ", 1)[-1])
            if shutil.which("nvidia-smi") and self.gpu_ids:
                query = subprocess.run(
                    ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                used = [
                    float(part.split(",")[1])
                    for part in query.stdout.splitlines()
                    if part.split(",")[0].strip().isdigit() and int(part.split(",")[0]) in self.gpu_ids
                ]
                if used:
                    sample["gpu_util_pct"] = sum(used) / len(used)
            self.samples.append(sample)

    def summary(self, skip_s: float) -> dict[str, float | None]:
        kept = [sample for sample in self.samples if sample["at_s"] >= skip_s]
        figures: dict[str, float | None] = {}
        for key in ("running", "waiting", "gpu_util_pct"):
            values = [sample[key] for sample in kept if key in sample]
            figures[f"{key}_mean"] = round(sum(values) / len(values), 1) if values else None
            figures[f"{key}_max"] = max(values) if values else None
        return figures


def gateway_workers() -> float | None:
    """How many gateway workers the field server runs (``modelyard_gateway_workers`` in /metrics)."""
    try:
        token = (DATA / "metrics-token").read_text().strip()
        text = httpx.get(f"{SERVER}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
    except (OSError, httpx.HTTPError):
        return None
    for line in text.splitlines():
        if line.startswith("modelyard_gateway_workers"):
            return float(line.rsplit(" ", 1)[-1])
    return None


def step_gateway_saturation(arguments: argparse.Namespace) -> bool:
    instance = running_instance(arguments.name)
    if instance is None:
        record("gateway-saturation", name=arguments.name, error="no running instance")
        return False
    backend = str((deployment(arguments.name) or {}).get("backend") or "")
    folder = RESULTS / arguments.name / f"saturation-s{arguments.streams}{arguments.suffix}"
    folder.mkdir(parents=True, exist_ok=True)
    direct_url = f"http://{engine_host(instance)}:{instance['port']}"
    command = [sys.executable, str(BENCHMARK), "--gateway-url", SERVER, "--direct-url", direct_url]
    command += ["--gateway-model", arguments.name, "--direct-model", arguments.name]
    command += ["--streams", str(arguments.streams), "--duration-s", f"{arguments.duration_s:g}"]
    command += ["--warmup-s", f"{arguments.warmup_s:g}", "--seed", str(arguments.seed)]
    command += ["--json", str(folder / "summary.json"), "--requests-out", str(folder / "requests.csv.xz")]
    sampler = Sampler(engine_metrics_url(instance, backend), list(instance.get("gpu_ids") or []))
    sampler.start()
    started = time.monotonic()
    print(f"$ {' '.join(command)}", flush=True)
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "BENCH_API_KEY": api_key()},
        timeout=arguments.warmup_s + arguments.duration_s + 300,
        check=False,
    )
    sampler.stopped.set()
    sampler.join()
    seconds = time.monotonic() - started
    (folder / "output.txt").write_text(result.stdout + ("\n--- stderr ---\n" + result.stderr))
    (folder / "engine-samples.json").write_text(json.dumps(sampler.samples))
    print(result.stdout, flush=True)
    summary: dict[str, Any] = {}
    if (folder / "summary.json").exists():
        summary = json.loads((folder / "summary.json").read_text())
    ratios = summary.get("ratios", {})
    record(
        "gateway-saturation",
        name=arguments.name,
        streams=arguments.streams,
        exit_code=result.returncode,
        seconds=round(seconds, 1),
        gateway_workers=gateway_workers(),
        labels={
            label: {key: row[key] for key in ("requests", "tokens_per_stream_s", "ttft_p50_s", "ttft_p99_s")}
            for label, row in summary.get("labels", {}).items()
        },
        ratios={name: estimates[0] for name, estimates in ratios.items() if estimates},
        engine=sampler.summary(skip_s=arguments.warmup_s),
        client_cpu_fraction=summary.get("client_cpu_fraction"),
        stderr_tail=result.stderr.strip()[-1000:],
    )
    return result.returncode == 0


def stop_field_server(timeout_s: float = 60.0) -> bool:
    """SIGTERM the field server's process group (``serve`` started it in a session of its own)."""
    pid_file = DATA / "serve.pid"
    if not pid_file.exists():
        return True
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def step_gateway_scaling(arguments: argparse.Namespace) -> bool:
    """``benchmarks/gateway_overhead.py`` with 1, 2 and 4 gateway workers (``FIELD_SCALING_ARGS``),
    once the field server is stopped, so that the host's cores are quiet."""
    folder = RESULTS / "gateway-scaling"
    folder.mkdir(parents=True, exist_ok=True)
    stopped = stop_field_server()
    command = [
        sys.executable,
        str(OVERHEAD),
        *shlex.split(os.environ.get("FIELD_SCALING_ARGS", SCALING_ARGS)),
    ]
    command += ["--json", str(folder / "overhead.json")]
    print(f"$ {shlex.join(command)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=560, check=False)
    (folder / "output.txt").write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    print(result.stdout, flush=True)
    summary: dict[str, Any] = {}
    if (folder / "overhead.json").exists():
        summary = json.loads((folder / "overhead.json").read_text()).get("summary", {})
    record(
        "gateway-scaling",
        server_stopped=stopped,
        exit_code=result.returncode,
        seconds=round(time.monotonic() - started, 1),
        cpus=os.cpu_count(),
        scaling=summary.get("scaling"),
        costs=summary.get("costs"),
        stderr_tail=result.stderr.strip()[-1500:],
    )
    return result.returncode == 0


def add_steps(steps: Any) -> None:
    """Register this module's step on ``field_run.py``'s subcommand parser."""
    saturation = steps.add_parser(
        "gateway-saturation", help="benchmarks/gateway_saturation.py: gateway/direct with A/A, one client"
    )
    saturation.add_argument("name")
    saturation.add_argument("--streams", type=int, default=256)
    saturation.add_argument("--duration-s", type=float, default=120.0)
    saturation.add_argument("--warmup-s", type=float, default=15.0)
    saturation.add_argument("--seed", type=int, default=1)
    saturation.add_argument("--suffix", default="", help="in the output folder's name (a repeat: -r2)")
    saturation.set_defaults(run=step_gateway_saturation)
    scaling = steps.add_parser(
        "gateway-scaling",
        help="field server stopped, then benchmarks/gateway_overhead.py (FIELD_SCALING_ARGS)",
    )
    scaling.set_defaults(run=step_gateway_scaling)
