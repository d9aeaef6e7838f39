"""A benchmark run as a task in a folder, for programs that start runs and watch them (the server).

``python -m modelyard.bench.task FOLDER`` reads ``FOLDER/task.json`` (a ``RunConfig`` as JSON
under ``config``, and an optional ``label``), runs the benchmark with the API key from
``$MODELYARD_BENCH_API_KEY`` (never on the command line), and keeps three files current:

- ``progress.json``: the point running (index, label, requests done of how many, or seconds);
- ``status.json``: ``running``, then ``succeeded`` or ``failed`` (with ``error``) at the end;
- the run's outputs (``result.json``, ``requests.jsonl``, ...) and ``report.html`` once done.

Files are replaced atomically, so a reader never sees half of one. Usage::

    write_task(folder, RunConfig(base_url="http://127.0.0.1:8080/v1", model="qwen"))
    subprocess.Popen([sys.executable, "-m", "modelyard.bench.task", str(folder)], env=...)
    read_json(folder / STATUS_FILE)["state"]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from modelyard.bench.records import (
    EngineInfo,
    LoadPoint,
    LoadPointResult,
    RequestRecord,
    RunConfig,
    SloTargets,
)
from modelyard.errors import ModelyardError

logger = logging.getLogger(__name__)

TASK_FILE = "task.json"
PROGRESS_FILE = "progress.json"
STATUS_FILE = "status.json"
REPORT_FILE = "report.html"
RESULT_FILE = "result.json"
API_KEY_VARIABLE = "MODELYARD_BENCH_API_KEY"
# Progress is written at most this often while requests finish.
PROGRESS_INTERVAL_S = 0.5


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=2))
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_task(folder: Path, config: RunConfig, *, label: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / TASK_FILE, {"config": dataclasses.asdict(config), "label": label})


def read_config(folder: Path) -> tuple[RunConfig, str | None]:
    task = read_json(folder / TASK_FILE)
    if task is None or not isinstance(task.get("config"), dict):
        raise FileNotFoundError(f"{folder / TASK_FILE} is missing or not a JSON object")
    fields = dict(task["config"])
    fields["slo"] = SloTargets(**(fields.get("slo") or {}))
    return RunConfig(**fields), task.get("label")


class FileProgress:
    """The ``ProgressListener`` of a task: ``progress.json``, rewritten at most twice a second."""

    def __init__(self, folder: Path, point_count: int) -> None:
        self.path = folder / PROGRESS_FILE
        self.point_count = point_count
        self.point_index = -1
        self.state: dict[str, Any] = {}
        self.written_at = 0.0

    def _write(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.written_at >= PROGRESS_INTERVAL_S:
            self.written_at = now
            write_json(self.path, self.state)

    def point_started(self, point: LoadPoint, total_requests: int | None, duration_s: float | None) -> None:
        self.point_index += 1
        self.state = {
            "point_index": self.point_index,
            "point_count": self.point_count,
            "point_label": point.label,
            "requests_total": total_requests,
            "duration_s": duration_s,
            "requests_done": 0,
            "requests_failed": 0,
            "point_started_unix_s": time.time(),
        }
        self._write(force=True)

    def request_finished(self, record: RequestRecord) -> None:
        if record.warmup:
            return
        self.state["requests_done"] = self.state.get("requests_done", 0) + 1
        if record.error:
            self.state["requests_failed"] = self.state.get("requests_failed", 0) + 1
        self._write()

    def point_finished(self, result: LoadPointResult) -> None:
        self.state["point_finished"] = True
        self._write(force=True)


def run_task(folder: Path, api_key: str | None) -> int:
    """Run the task in ``folder``; 0 when the run succeeded (and is valid), 1 otherwise."""
    from modelyard.bench.outputs import write_outputs
    from modelyard.bench.report_html import write_report
    from modelyard.bench.runner import load_points, run_benchmark

    write_json(folder / STATUS_FILE, {"state": "running", "pid": os.getpid(), "started_unix_s": time.time()})
    try:
        config, label = read_config(folder)
        listener = FileProgress(folder, len(load_points(config)))
        engine = EngineInfo(base_url=config.base_url, served_model=config.model, label=label)
        outcome = run_benchmark(config, api_key=api_key, engine=engine, progress=listener)
        paths = write_outputs(outcome, folder)
        write_report(paths.result_json, folder / REPORT_FILE, label=label)
    except ModelyardError as error:
        status = {"state": "failed", "error": error.message, "hint": error.hint}
    except (OSError, ValueError, TypeError) as error:
        logger.exception("benchmark task %s failed", folder)
        status = {"state": "failed", "error": f"{type(error).__name__}: {error}", "hint": None}
    else:
        result = outcome.result
        status = {
            "state": "succeeded" if result.valid else "failed",
            "error": None if result.valid else f"the run is invalid: {result.invalid_reason}",
            "hint": None,
        }
    write_json(folder / STATUS_FILE, {**status, "pid": os.getpid(), "finished_unix_s": time.time()})
    return 0 if status["state"] == "succeeded" else 1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m modelyard.bench.task FOLDER\n")
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_task(Path(argv[0]), os.environ.get(API_KEY_VARIABLE) or None)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
