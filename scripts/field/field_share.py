"""The field run's steps for engines that share one GPU by the estimate, and for a second server.

``field_run.py`` registers them beside its own (``scale``, ``kv-shared``, ``prefix-routing``,
``chat``); each goes through modelyard's CLI or API as a user would, appends what it saw to
``RESULTS/steps.jsonl`` and returns False when it did not pass.

- ``scale NAME N``: ``modelyard scale``, timed until the new replicas run.
- ``kv-shared NAME...``: every engine of those deployments against modelyard's estimate: the
  bytes its placement booked and the knob set from them, the KV cache the engine logged against
  ``modelyard estimate`` with that knob, and the GPU's memory per process (``nvidia-smi``).
- ``prefix-routing NAME``: ``benchmarks/prefix_routing.py --one-deployment`` on a deployment of two
  replicas, its routing switched between least outstanding and prefix before each pass; the
  engines' own prefix-cache counters read before and after, per replica.
- ``chat NAME``: one chat answer through the gateway, timed.
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
from pathlib import Path
from typing import Any

import httpx
from field_common import (
    DATA,
    KEY_FILE,
    RESULTS,
    SERVER,
    VLLM_KV_LINE,
    api_key,
    deployment,
    local_gpu_spec,
    model_dir,
    modelyard,
    record,
    save_deployment_files,
)

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE_KV_LINE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
# "KV cache 7.00 GiB (16 x 4,096 tokens)" in a placement's demand summary.
DEMAND_KV = re.compile(r"KV cache [\d.]+ GiB \((\d+) x ([\d,]+) tokens\)")


def step_scale(arguments: argparse.Namespace) -> bool:
    """``modelyard scale NAME N`` until the replicas run (starts one after the other on a shared
    GPU: vLLM sizes its KV cache from the device's free memory while it profiles)."""
    started = time.monotonic()
    result = modelyard(
        "scale", arguments.name, str(arguments.replicas), "--timeout", str(arguments.timeout),
        timeout=arguments.timeout + 60,
    )  # fmt: skip
    seconds = time.monotonic() - started
    save_deployment_files(arguments.name, RESULTS / arguments.name / f"scaled-{arguments.replicas}")
    found = deployment(arguments.name) or {}
    running = [item for item in found.get("instances", []) if item.get("state") == "running"]
    record(
        "scale",
        name=arguments.name,
        replicas=arguments.replicas,
        exit_code=result.returncode,
        seconds_to_running=round(seconds, 1) if len(running) >= arguments.replicas else None,
        running=len(running),
        stderr_tail=result.stderr.strip()[-1500:],
    )
    return result.returncode == 0 and len(running) >= arguments.replicas


def gpu_processes() -> list[dict[str, Any]]:
    """Per process on the GPUs, as nvidia-smi reads them (pid, used MiB)."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in listed.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            rows.append({"pid": int(parts[0]), "used_mib": int(parts[1])})
    return rows


def estimated_kv_tokens(found: dict[str, Any], knob: str, fraction: float) -> tuple[int | None, str]:
    """``modelyard estimate`` of the deployment's flags with the knob as the placement set it."""
    flags = [*found.get("backend_parameters", []), knob, f"{fraction:g}"]
    estimate = modelyard(
        "estimate", model_dir(), "--gpus", local_gpu_spec(), "--backend", str(found.get("backend")),
        "--engine-version", str(found.get("backend_version")),
        *[item for flag in flags for item in ("--args", flag)], "--json",
        timeout=120,
    )  # fmt: skip
    if estimate.returncode != 0:
        return None, estimate.stderr
    tokens = json.loads(estimate.stdout)["plan_on_total"]["kv_cache_tokens"]
    return int(tokens), estimate.stdout


def engine_row(name: str, found: dict[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
    folder = RESULTS / name / f"instance-{instance['id']}"
    folder.mkdir(parents=True, exist_ok=True)
    logs = modelyard("logs", name, "--instance", str(instance["id"]), timeout=60).stdout
    (folder / "engine.log").write_text(logs)
    placement = instance.get("placement") or {}
    knob, fraction = placement.get("memory_knob"), placement.get("memory_fraction")
    logged = [int(match.replace(",", "")) for match in VLLM_KV_LINE.findall(logs)]
    available = [float(match) for match in AVAILABLE_KV_LINE.findall(logs)]
    predicted = None
    if knob and fraction is not None:
        predicted, text = estimated_kv_tokens(found, str(knob), float(fraction))
        (folder / "estimate.json").write_text(text)
    demand = DEMAND_KV.search(str(placement.get("demand") or ""))
    booked_tokens = int(demand.group(1)) * int(demand.group(2).replace(",", "")) if demand else None
    actual = logged[-1] if logged else None
    return {
        "deployment": name,
        "instance": instance["id"],
        "pid": instance.get("pid"),
        "state": instance.get("state"),
        "gpu_ids": instance.get("gpu_ids"),
        "booked_bytes": placement.get("memory_bytes_per_gpu"),
        "knob": f"{knob} {fraction}" if knob else None,
        "demand": placement.get("demand"),
        "booked_kv_tokens": booked_tokens,
        "estimated_kv_tokens": predicted,
        "logged_kv_tokens": actual,
        "logged_available_kv_gib": available[-1] if available else None,
        "error_pct": round(100.0 * (predicted - actual) / actual, 2) if predicted and actual else None,
        "verification": [
            f"{check.get('check_id')} {check.get('status')}" for check in instance.get("verification") or []
        ],
    }


def step_kv_shared(arguments: argparse.Namespace) -> bool:
    """Every engine of the deployments named: placement, knob, logged KV cache against the estimate."""
    engines = []
    for name in arguments.names:
        found = deployment(name)
        if found is None:
            record("kv-shared", name=name, error="no such deployment")
            return False
        save_deployment_files(name, RESULTS / name / "shared")
        engines += [engine_row(name, found, instance) for instance in found.get("instances", [])]
    gpus = modelyard("gpus", timeout=60).stdout
    (RESULTS / "gpus-shared.txt").write_text(gpus)
    record("kv-shared", names=arguments.names, engines=engines, gpu_processes=gpu_processes(), gpus=gpus)
    return bool(engines) and all(
        row["state"] == "running" and row["logged_kv_tokens"] and row["estimated_kv_tokens"]
        for row in engines
    )


def prefix_counters(port: int) -> dict[str, float]:
    """One engine's own prefix-cache counters (vLLM's /metrics)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    counters = {"hits": 0.0, "queries": 0.0}
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            counters["hits"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            counters["queries"] += float(line.rsplit(" ", 1)[1])
    return counters


def step_prefix_routing(arguments: argparse.Namespace) -> bool:
    """Least outstanding against prefix routing on one deployment of two replicas (the benchmark
    switches its routing before each pass); each engine's counters read directly, before and after."""
    found = deployment(arguments.name) or {}
    ports = {
        item["id"]: item["port"] for item in found.get("instances", []) if item.get("state") == "running"
    }
    if len(ports) < 2:
        record("prefix-routing", name=arguments.name, error=f"{len(ports)} running replica(s), needs 2")
        return False
    before = {instance: prefix_counters(port) for instance, port in ports.items()}
    folder = RESULTS / "prefix-routing"
    folder.mkdir(parents=True, exist_ok=True)
    settings = shlex.split(os.environ.get("FIELD_PREFIX_ARGS", "--conversations 32 --turns 6 --rounds 2"))
    command = [sys.executable, str(ROOT / "benchmarks" / "prefix_routing.py"), "--no-platform"]
    command += ["--url", SERVER, "--one-deployment", "--deployments", arguments.name]
    command += ["--metrics-token-file", str(DATA / "metrics-token")]
    command += ["--admin-password-file", str(DATA / "admin-password"), *settings]
    command += ["--json", str(folder / "result.json")]
    print(f"$ {shlex.join(command)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "BENCH_API_KEY": KEY_FILE.read_text().strip()},
        timeout=arguments.timeout,
        check=False,
    )
    (folder / "summary.txt").write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    after = {instance: prefix_counters(port) for instance, port in ports.items()}
    record(
        "prefix-routing",
        name=arguments.name,
        exit_code=result.returncode,
        seconds=round(time.monotonic() - started, 1),
        settings=settings,
        summary=result.stdout[-2500:],
        engine_counters={
            str(instance): {key: after[instance][key] - before[instance][key] for key in ("hits", "queries")}
            for instance in ports
        },
    )
    return result.returncode == 0


def step_chat(arguments: argparse.Namespace) -> bool:
    """One chat answer through the gateway: status, seconds, the answer as the client got it."""
    started = time.monotonic()
    reply = httpx.post(
        f"{SERVER}/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key()}"},
        json={
            "model": arguments.name,
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "max_tokens": 64,
        },
        timeout=120,
    )
    seconds = time.monotonic() - started
    folder = RESULTS / arguments.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "chat.json").write_text(reply.text)
    record(
        "chat",
        name=arguments.name,
        status=reply.status_code,
        seconds=round(seconds, 3),
        body=reply.text[:600],
    )
    return reply.status_code == 200


def add_steps(steps: Any) -> None:
    """Register this module's steps on ``field_run.py``'s subcommand parser."""
    scale = steps.add_parser("scale", help="modelyard scale NAME N, timed")
    scale.add_argument("name")
    scale.add_argument("replicas", type=int)
    scale.add_argument("--timeout", type=float, default=420.0)
    scale.set_defaults(run=step_scale)
    shared = steps.add_parser(
        "kv-shared", help="engines sharing a GPU: placement, knob, KV logged vs estimate"
    )
    shared.add_argument("names", nargs="+")
    shared.set_defaults(run=step_kv_shared)
    prefix = steps.add_parser(
        "prefix-routing", help="benchmarks/prefix_routing.py --one-deployment (FIELD_PREFIX_ARGS)"
    )
    prefix.add_argument("name")
    prefix.add_argument("--timeout", type=float, default=400.0)
    prefix.set_defaults(run=step_prefix_routing)
    chat = steps.add_parser("chat", help="one chat answer through the gateway")
    chat.add_argument("name")
    chat.set_defaults(run=step_chat)
