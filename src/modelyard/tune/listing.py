"""The tunes kept under a data directory (``<data-dir>/tunes/<id>/``), read for the console's
tune pages and ``GET /api/v1/tunes``: what each tune is (from ``tune.json``), how far it got
(from ``journal.jsonl``) and its answer (``report.json``, once a session has written it).

    for summary in list_tunes(data_dir):
        print(summary["tune_id"], summary["state"], summary["winner"])
    detail = read_tune(data_dir, "3f9c2a1b7d04")   # its arguments, journal counts, report

Nothing is written here: the tune runs in the CLI (``modelyard tune``), which may sit on
another host; the server shows the tunes of the CLI that shares its data directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from modelyard.errors import InvalidInput, NotFound
from modelyard.tune.journal import JOURNAL_FILE, TUNE_FILE, tunes_dir

REPORT_FILE = "report.json"


def _journal_counts(folder: Path) -> dict[str, Any]:
    runs = starts = failed_starts = 0
    spent_s = 0.0
    path = folder / JOURNAL_FILE
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill
        if entry.get("kind") == "measurement":
            runs += 1
            spent_s += float(entry.get("duration_s", 0.0))
        elif entry.get("kind") == "start":
            starts += 1
            failed_starts += 1 if entry.get("failed_reason") else 0
            spent_s += float(entry.get("seconds", 0.0))
    return {"runs": runs, "starts": starts, "failed_starts": failed_starts, "spent_s": spent_s}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _summary(folder: Path) -> dict[str, Any] | None:
    record = _read_json(folder / TUNE_FILE)
    if record is None:
        return None
    arguments = record.get("arguments") or {}
    report = _read_json(folder / REPORT_FILE)
    journal = folder / JOURNAL_FILE
    files = (folder / TUNE_FILE, journal, folder / REPORT_FILE)
    changed = max((path.stat().st_mtime for path in files if path.exists()), default=0.0)
    winner = (report or {}).get("winners") or []
    gain = (report or {}).get("gain_over_defaults") or {}
    return {
        "tune_id": folder.name,
        "model": arguments.get("model"),
        "gpus": arguments.get("gpus"),
        "workload": (arguments.get("workload") or {}).get("name"),
        "slos": arguments.get("slos", []),
        "state": "reported" if report is not None else "measuring",
        "updated_at": changed,
        "winner": winner[0]["label"] if winner else None,
        "winner_throughput": winner[0]["throughput"] if winner else None,
        "gain_over_defaults": gain.get("ratio"),
        "stopped_reason": (report or {}).get("stopped_reason"),
        "resume_command": f"modelyard tune --resume {folder.name}",
        **_journal_counts(folder),
    }


def list_tunes(data_dir: Path) -> list[dict[str, Any]]:
    """Every tune of ``data_dir``, the most recently changed first."""
    root = tunes_dir(data_dir)
    if not root.is_dir():
        return []
    summaries = [summary for folder in root.iterdir() if folder.is_dir() and (summary := _summary(folder))]
    return sorted(summaries, key=lambda summary: summary["updated_at"], reverse=True)


def read_tune(data_dir: Path, tune_id: str) -> dict[str, Any]:
    """One tune: its summary, its arguments and CLI options (``tune.json``), and its report (None
    until a session has finished or stopped)."""
    if not tune_id.isalnum():
        raise InvalidInput(f"tune id {tune_id!r} is not a tune id", hint="ids look like 3f9c2a1b7d04")
    folder = tunes_dir(data_dir) / tune_id
    summary = _summary(folder) if folder.is_dir() else None
    if summary is None:
        raise NotFound(
            f"no tune {tune_id} in this server's data directory",
            hint="tunes run in the CLI (`modelyard tune`); the server lists those of its own --data-dir",
        )
    record = _read_json(folder / TUNE_FILE) or {}
    return {
        **summary,
        "arguments": record.get("arguments") or {},
        "cli": record.get("cli") or {},
        "report": _read_json(folder / REPORT_FILE),
    }
