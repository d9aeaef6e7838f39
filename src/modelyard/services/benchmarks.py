"""Benchmark runs started by the server against its own deployments, through its gateway.

Each run is a folder ``<data-dir>/benchmarks/<run-id>/`` and a process of its own
(``python -m modelyard.bench.task``, see ``modelyard.bench.task``), so the load generator never
shares the server's event loop (it would measure itself) and a run survives nothing it should
not: a run whose process is gone without a final status is shown as failed. The key is the
console's own gateway key, handed over in the environment. One run at a time: two runs would
load the same engines and distort each other.

Usage::

    run = start_benchmark(settings, session, BenchmarkRequest(deployment="qwen", concurrency=[1, 4]), key)
    describe_run(settings, run.run_id)["state"]
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy.orm import Session

from modelyard.bench import task
from modelyard.bench.records import RunConfig
from modelyard.errors import Conflict, InvalidInput, NotFound
from modelyard.services.deployments import get_deployment
from modelyard.settings import Settings

logger = logging.getLogger(__name__)

RUN_ID_PATTERN = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
MAXIMUM_POINTS = 16
MAXIMUM_CONCURRENCY = 1024
MAXIMUM_REQUESTS = 100_000
MAXIMUM_DURATION_S = 3600.0
MAXIMUM_TOKENS = 131_072
# Written by the server at launch: the deployment, when, and the process (pid + start time).
LAUNCH_FILE = "launch.json"
OUTPUT_FILE = "output.log"


@dataclass
class BenchmarkRequest:
    deployment: str
    concurrency: list[int] = field(default_factory=lambda: [1])
    input_tokens: int = 128
    output_tokens: int = 128
    num_requests: int | None = 50
    duration_s: float | None = None
    label: str | None = None


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    folder: Path


def benchmarks_dir(settings: Settings) -> Path:
    return settings.data_dir / "benchmarks"


def _check(request: BenchmarkRequest) -> None:
    if not request.concurrency:
        raise InvalidInput("concurrency is empty", hint="give one or more numbers of streams, e.g. 1,4,16")
    if len(request.concurrency) > MAXIMUM_POINTS:
        raise InvalidInput(f"{len(request.concurrency)} load points; at most {MAXIMUM_POINTS} per run")
    bad = [value for value in request.concurrency if not 1 <= value <= MAXIMUM_CONCURRENCY]
    if bad:
        raise InvalidInput(f"concurrency {bad[0]} is not between 1 and {MAXIMUM_CONCURRENCY}")
    for name in ("input_tokens", "output_tokens"):
        value = getattr(request, name)
        if not 1 <= value <= MAXIMUM_TOKENS:
            raise InvalidInput(f"{name} {value} is not between 1 and {MAXIMUM_TOKENS}")
    if request.num_requests is None and request.duration_s is None:
        raise InvalidInput("give a number of requests per point or a duration", hint="num_requests: 50")
    if request.num_requests is not None and not 1 <= request.num_requests <= MAXIMUM_REQUESTS:
        raise InvalidInput(f"num_requests {request.num_requests} is not between 1 and {MAXIMUM_REQUESTS}")
    if request.duration_s is not None and not 1 <= request.duration_s <= MAXIMUM_DURATION_S:
        raise InvalidInput(f"duration_s {request.duration_s} is not between 1 and {MAXIMUM_DURATION_S:g}")


def _new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def _folder(settings: Settings, run_id: str) -> Path:
    if not RUN_ID_PATTERN.match(run_id):
        raise NotFound(f"no benchmark run {run_id!r}", hint="run ids look like 20260101-120000-a1b2c3")
    folder = benchmarks_dir(settings) / run_id
    if not (folder / task.TASK_FILE).is_file():
        raise NotFound(f"no benchmark run {run_id!r}", hint="see GET /api/v1/benchmarks for the runs")
    return folder


def _process_alive(launched: dict[str, Any]) -> bool:
    """Whether the run's process (pid and start time, as recorded at launch) still runs."""
    pid = launched.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        process = psutil.Process(pid)
        same = abs(process.create_time() - float(launched.get("process_start_time", 0.0))) < 1.0
        return same and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _state(folder: Path) -> dict[str, Any]:
    status = task.read_json(folder / task.STATUS_FILE) or {"state": "queued"}
    launched = task.read_json(folder / LAUNCH_FILE)
    if launched is None:  # being launched right now
        return status
    if status.get("state") in ("running", "queued") and not _process_alive(launched):
        return {**status, "state": "failed", "error": "the benchmark process ended without a result"}
    return status


def describe_run(settings: Settings, run_id: str, *, folder: Path | None = None) -> dict[str, Any]:
    """A run as the API shows it: its request, state, progress and headline figures."""
    folder = folder or _folder(settings, run_id)
    config, label = task.read_config(folder)
    launched = task.read_json(folder / LAUNCH_FILE) or {}
    status = _state(folder)
    summary = None
    result = task.read_json(folder / task.RESULT_FILE)
    if result is not None:
        summary = [_point_summary(point) for point in result.get("points", [])]
    return {
        "id": run_id,
        "deployment": launched.get("deployment", config.model),
        "label": label,
        "created_at": launched.get("created_at"),
        "state": status.get("state"),
        "error": status.get("error"),
        "hint": status.get("hint"),
        "progress": task.read_json(folder / task.PROGRESS_FILE),
        "config": {
            "concurrency": config.load_values,
            "input_tokens": config.input_tokens,
            "output_tokens": config.output_tokens,
            "num_requests": config.num_requests,
            "duration_s": config.duration_s,
        },
        "points": summary,
        "has_report": (folder / task.REPORT_FILE).is_file(),
    }


def _point_summary(point: dict[str, Any]) -> dict[str, Any]:
    metrics = point.get("metrics") or {}

    def statistic(metric: str, name: str = "median") -> Any:
        value = metrics.get(metric)
        return value.get(name) if isinstance(value, dict) else None

    return {
        "load": point.get("point", {}).get("value"),
        "valid": point.get("valid"),
        "requests_succeeded": point.get("requests_succeeded"),
        "output_tokens_per_s": point.get("output_token_throughput_per_s"),
        "requests_per_s": point.get("request_throughput_per_s"),
        "ttft_median_ms": statistic("ttft_ms"),
        "tpot_median_ms": statistic("tpot_ms"),
    }


def list_runs(settings: Settings) -> list[dict[str, Any]]:
    """Every run, newest first."""
    root = benchmarks_dir(settings)
    if not root.is_dir():
        return []
    runs = []
    for folder in sorted(root.iterdir(), reverse=True):
        if RUN_ID_PATTERN.match(folder.name) and (folder / task.TASK_FILE).is_file():
            runs.append(describe_run(settings, folder.name, folder=folder))
    return runs


def _running(settings: Settings) -> list[str]:
    return [run["id"] for run in list_runs(settings) if run["state"] in ("queued", "running")]


def start_benchmark(
    settings: Settings, session: Session, request: BenchmarkRequest, api_key: str
) -> StartedRun:
    """Check the request, then start its process; the run's folder is its record."""
    _check(request)
    deployment = get_deployment(session, request.deployment)
    if deployment.desired_state != "running" or deployment.replicas == 0:
        raise Conflict(
            f"deployment {deployment.name!r} is not running (desired state {deployment.desired_state}, "
            f"{deployment.replicas} replicas)",
            hint="start it (or scale it up) first",
        )
    running = _running(settings)
    if running:
        raise Conflict(
            f"benchmark {running[0]} is still running; runs at the same time would distort each other",
            hint="wait for it to finish, or stop it (DELETE /api/v1/benchmarks/ID)",
        )
    config = RunConfig(
        base_url=f"{settings.server_url}/v1",
        model=deployment.name,
        load_kind="concurrency",
        load_values=[float(value) for value in request.concurrency],
        num_requests=request.num_requests,
        duration_s=request.duration_s,
        input_tokens=request.input_tokens,
        output_tokens=request.output_tokens,
    )
    run_id = _new_run_id()
    folder = benchmarks_dir(settings) / run_id
    task.write_task(folder, config, label=request.label or deployment.name)
    environment = {**os.environ, task.API_KEY_VARIABLE: api_key}
    with (folder / OUTPUT_FILE).open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelyard.bench.task", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=folder,
            start_new_session=True,
        )
    try:
        start_time = psutil.Process(process.pid).create_time()
    except psutil.Error:
        start_time = 0.0
    task.write_json(
        folder / LAUNCH_FILE,
        {
            "deployment": deployment.name,
            "created_at": datetime.now(UTC).isoformat(),
            "pid": process.pid,
            "process_start_time": start_time,
        },
    )
    # Reap it when it ends, so no zombie is left behind.
    threading.Thread(target=process.wait, name=f"bench-{run_id}", daemon=True).start()
    logger.info("benchmark %s started against %s (pid %d)", run_id, deployment.name, process.pid)
    return StartedRun(run_id=run_id, folder=folder)


def run_file(settings: Settings, run_id: str, name: str) -> Path:
    """A file of a run (the report, the output log); ``NotFound`` while it is not written."""
    path = _folder(settings, run_id) / name
    if not path.is_file():
        raise NotFound(f"benchmark {run_id} has no {name} yet", hint="it is written when the run ends")
    return path


def remove_run(settings: Settings, run_id: str) -> None:
    """Stop the run's process when it still runs, then remove its folder."""
    folder = _folder(settings, run_id)
    launched = task.read_json(folder / LAUNCH_FILE) or {}
    if _process_alive(launched):
        process = psutil.Process(int(launched["pid"]))
        process.terminate()
        try:
            process.wait(timeout=10)
        except psutil.TimeoutExpired:
            process.kill()
    shutil.rmtree(folder)
