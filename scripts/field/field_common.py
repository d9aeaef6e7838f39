"""What the field run's steps share: modelyard's CLI as a user runs it, the step record, the
deployments as ``ps --json`` shows them, and the benchmark command lines.

Environment: ``FIELD_RESULTS`` (default /tmp/field/results), ``FIELD_DATA`` (modelyard's data
directory, default /tmp/field/data), ``FIELD_PORT`` (default 8080). Used by ``field_run.py`` and
``field_share.py``; not a library.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(os.environ.get("FIELD_RESULTS", "/tmp/field/results"))
DATA = Path(os.environ.get("FIELD_DATA", "/tmp/field/data"))
PORT = int(os.environ.get("FIELD_PORT", "8080"))
SERVER = f"http://127.0.0.1:{PORT}"
MODEL_NAME = "qwen3-field"
KEY_FILE = DATA / "field-key"
MODEL_DIR_FILE = DATA / "field-model-dir"
STARTED = time.monotonic()

# What each engine logs about its KV cache once it has sized it.
VLLM_KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
SGLANG_KV_LINE = re.compile(r"max_total_num_tokens=(\d+)")


def local_gpu_spec(count: int = 1) -> str:
    """This machine's GPU as ``modelyard estimate --gpus`` takes it: ``1xH100`` on an H100,
    ``1xH200`` on an H200, else ``1x<total GiB>GiB`` (the estimate must be for the card the engine
    ran on; the kv-shared step once estimated an H200 whatever the card). nvidia-smi reads it;
    without it (a rehearsal), modelyard's NVML reading, which the NVML double answers."""
    try:
        line = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.splitlines()[0]  # fmt: skip
        name, total_mib = (part.strip() for part in line.split(","))
        total_bytes = int(total_mib) << 20
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        # No nvidia-smi (the rehearsal): NVML as modelyard reads it, which the NVML double answers.
        from modelyard.hardware.gpus import read_gpu_inventory

        inventory = read_gpu_inventory()
        if not inventory.gpus:
            raise SystemExit(f"no GPU to estimate for: {inventory.unavailable_reason}") from None
        name, total_bytes = inventory.gpus[0].name, inventory.gpus[0].memory_total_bytes
    return gpu_spec_for(name, total_bytes, count)


def gpu_spec_for(name: str, total_bytes: int, count: int = 1) -> str:
    """``modelyard estimate --gpus`` for ``count`` GPUs named ``name``: the board where the estimator
    knows it (``1xH100``), else the size (``1x47GiB``)."""
    for known in ("H200", "H100", "A100", "L40S", "L4"):
        if known in name:
            return f"{count}x{known}"
    return f"{count}x{total_bytes >> 30}GiB"


def cli_environment() -> dict[str, str]:
    return {**os.environ, "MODELYARD_URL": SERVER, "MODELYARD_DATA_DIR": str(DATA), "NO_COLOR": "1"}


def bench_environment() -> dict[str, str]:
    """The CLI's environment with the gateway key, which never goes on a command line (logged)."""
    return {**cli_environment(), "MODELYARD_BENCH_API_KEY": api_key()}


def modelyard(
    *arguments: str, timeout: float = 900.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``modelyard ARGUMENTS`` as a user would; never raises for a non-zero exit."""
    command = [sys.executable, "-m", "modelyard.cli.main", *arguments]
    print(f"$ modelyard {shlex.join(arguments)}", flush=True)
    result = subprocess.run(
        command, capture_output=True, text=True, env=env or cli_environment(), timeout=timeout, check=False
    )
    if result.returncode != 0:
        print(f"  exit {result.returncode}: {result.stderr.strip()[-2000:]}", flush=True)
    return result


def record(step: str, **fields: Any) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    entry = {"step": step, "at_s": round(time.time(), 3), **fields}
    with open(RESULTS / "steps.jsonl", "a") as steps:
        steps.write(json.dumps(entry) + "\n")
    print(f"[{step}] " + json.dumps(fields)[:1500], flush=True)


def admin_auth() -> tuple[str, str]:
    return ("admin", (DATA / "admin-password").read_text().strip())


def api_key() -> str:
    return KEY_FILE.read_text().strip()


def model_dir() -> str:
    return MODEL_DIR_FILE.read_text().strip()


def deployment(name: str) -> dict[str, Any] | None:
    result = modelyard("ps", name, "--json", timeout=60)
    if result.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def running_instance(name: str) -> dict[str, Any] | None:
    found = deployment(name)
    for instance in (found or {}).get("instances", []):
        if instance.get("state") == "running":
            return dict(instance)
    return None


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float, every_s: float = 0.5) -> float:
    """Seconds until ``condition()`` held; raises TimeoutError naming ``what``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return time.monotonic() - started
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def save_deployment_files(name: str, folder: Path) -> None:
    """``ps NAME --json`` (instances, verification, events) and the engine's log, as they are now."""
    folder.mkdir(parents=True, exist_ok=True)
    ps = modelyard("ps", name, "--json", timeout=60)
    (folder / "ps.json").write_text(ps.stdout or ps.stderr)
    logs = modelyard("logs", name, timeout=60)
    (folder / "engine.log").write_text(
        logs.stdout + ("\n--- stderr ---\n" + logs.stderr if logs.stderr else "")
    )


def deploy_arguments(arguments: argparse.Namespace) -> list[str]:
    command = ["deploy", MODEL_NAME, "--name", arguments.name, "--backend", arguments.backend]
    if arguments.version:
        command += ["--version", arguments.version]
    if arguments.args:
        command += ["--args", arguments.args]
    for pair in arguments.env or []:
        command += ["--env", pair]
    if arguments.gpu_ids:
        command += ["--gpu-ids", arguments.gpu_ids]
    elif arguments.gpus is not None:
        command += ["--gpus", str(arguments.gpus)]
    if getattr(arguments, "replicas", None):
        command += ["--replicas", str(arguments.replicas)]
    if getattr(arguments, "gpu_memory", None):  # placed by memory: the knob set from the estimate
        command += ["--gpu-memory", arguments.gpu_memory]
    # FIELD_SKIP_VERIFICATION=1: a rehearsal on the engine double (it calls no tools).
    if arguments.skip_verification or os.environ.get("FIELD_SKIP_VERIFICATION") == "1":
        command += ["--skip-verification"]
    return [*command, "--timeout", str(arguments.timeout), "--json"]


def bench_arguments(
    base_url: str,
    model: str,
    label: str,
    out: Path,
    metrics_url: str | None,
    seed: int = 7,
    gpu_ids: list[int] | None = None,
    concurrency: str | None = None,
    duration_s: float | None = None,
) -> list[str]:
    """``modelyard bench run`` for the field run; the load and its length come from FIELD_*
    unless given."""
    command = ["bench", "run", "--base-url", base_url, "--model", model, "--label", label]
    command += ["--concurrency", concurrency or os.environ.get("FIELD_CONCURRENCY", "1,16,64,256")]
    if duration_s is not None:
        command += ["--duration-s", f"{duration_s:g}", "--warmup-s", "3"]
    elif os.environ.get("FIELD_NUM_REQUESTS"):  # a fixed amount of work per point, repeated
        command += ["--num-requests", os.environ["FIELD_NUM_REQUESTS"], "--warmup-requests", "16"]
        command += ["--repeats", os.environ.get("FIELD_REPEATS", "1")]
    else:
        command += ["--duration-s", os.environ.get("FIELD_POINT_S", "12"), "--warmup-s", "3"]
    command += [
        "--input-tokens",
        "256",
        "--output-tokens",
        "128",
        "--tokenizer",
        model_dir(),
        "--seed",
        str(seed),
    ]
    command += ["--metrics-interval-s", "0.5", "--out", str(out), "--json"]
    if metrics_url:
        command += ["--metrics-url", metrics_url]
    if gpu_ids:  # the engine's GPUs only: an idle neighbour would dilute its utilization
        command += ["--gpu-ids", ",".join(str(index) for index in gpu_ids)]
    return command


def engine_host(instance: dict[str, Any]) -> str:
    """Where the engine listens: loopback for a process, its node's address on the Ray runtime."""
    return str(instance.get("host") or "127.0.0.1")


def bench_target(
    name: str, instance: dict[str, Any], backend: str, path: str
) -> tuple[str, str, dict[str, str]]:
    """Where a bench on ``path`` sends (base URL), the model name it sends, and its environment
    (the gateway's key only for the gateway). transformers serve answers to its model path."""
    if path == "gateway":
        return f"{SERVER}/v1", name, bench_environment()
    served = model_dir() if backend == "transformers" else name
    return f"http://{engine_host(instance)}:{instance['port']}/v1", served, cli_environment()


def engine_metrics_url(instance: dict[str, Any], backend: str) -> str | None:
    """The engine's own /metrics (transformers serve has none)."""
    if backend == "transformers":
        return None
    return f"http://{engine_host(instance)}:{instance['port']}/metrics"


def summarize(result_path: Path) -> list[dict[str, Any]]:
    """Per point: load, requests, failures, output tokens/s, TTFT/TPOT/ITL medians (ms)."""
    if not result_path.exists():
        return []
    run = json.loads(result_path.read_text())
    rows = []
    for point in run.get("points", []):
        metrics = point.get("metrics", {})
        rows.append(
            {
                "load": point.get("point", {}).get("value"),
                "ok": point.get("requests_succeeded"),
                "failed": point.get("requests_failed"),
                "out_tok_s": round(point.get("output_token_throughput_per_s") or 0.0, 1),
            }
            | {
                f"{name}_p50": round(metrics[name]["median"], 2)
                for name in ("ttft_ms", "tpot_ms", "itl_ms")
                if (metrics.get(name) or {}).get("median") is not None
            }
        )
    return rows


def engine_busy(metrics_url: str) -> bool:
    """True once vLLM's or SGLang's /metrics counts a running request."""
    try:
        text = httpx.get(metrics_url, timeout=2).text
    except httpx.HTTPError:
        return False
    names = ("vllm:num_requests_running", "sglang:num_running_reqs")
    return any(line.startswith(names) and float(line.rsplit(" ", 1)[-1]) > 0 for line in text.splitlines())
