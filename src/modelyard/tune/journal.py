"""A tune's state on disk, so that an interrupted tune (Ctrl-C, a kill, a server restart) goes on
where it stopped: ``<data-dir>/tunes/<tune-id>/``.

- ``tune.json``: the arguments that define the tune (its id is their digest);
- ``journal.jsonl``: one line per finished step, appended and flushed to disk before the next
  begins: each candidate start (seconds, or why it failed) and each measurement;
- ``runs/<candidate-id>/rung-<n>/``: the bench's record of each measurement;
- ``prompts.jsonl``: the prompts every candidate replays; ``report.json``, ``report.md``.

A file rather than a table: the tune runs in the CLI, which may talk to a remote server, and its
bench records are files already; an append-only journal survives a SIGKILL between two steps
(a torn last line is ignored), and nothing needs a migration.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelyard.errors import InvalidInput, NotFound
from modelyard.tune.measurement import Measurement

TUNE_FILE = "tune.json"
JOURNAL_FILE = "journal.jsonl"
ID_LENGTH = 12


def tune_id_for(arguments: dict[str, Any]) -> str:
    """The same arguments give the same id (so a rerun resumes)."""
    text = json.dumps(arguments, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def tunes_dir(data_dir: Path) -> Path:
    return data_dir / "tunes"


@dataclass(frozen=True)
class StartRecord:
    """A candidate's start: how long it took, or why it failed (then it is dropped)."""

    candidate_id: str
    seconds: float
    failed_reason: str | None = None


class Journal:
    """The append-only record of a tune (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.measurements: dict[tuple[str, int], Measurement] = {}
        self.starts: list[StartRecord] = []
        self._read()

    @classmethod
    def open(cls, data_dir: Path, arguments: dict[str, Any], *, cli: dict[str, Any] | None = None) -> Journal:
        """The tune of these arguments: a new folder, or the existing one (resumed). ``cli``: the
        command's own options, kept for ``--resume``."""
        tune_id = tune_id_for(arguments)
        folder = tunes_dir(data_dir) / tune_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / TUNE_FILE
        if not path.is_file():
            record = {"tune_id": tune_id, "arguments": arguments, "cli": cli or {}}
            path.write_text(json.dumps(record, indent=2, default=str))
        return cls(folder)

    @classmethod
    def arguments_of(cls, data_dir: Path, tune_id: str) -> dict[str, Any]:
        """What ``tune.json`` holds (``arguments``, ``cli``): for ``modelyard tune --resume ID``."""
        if not tune_id.isalnum():
            raise InvalidInput(f"tune id {tune_id!r} is not a tune id", hint="ids look like 3f9c2a1b7d04")
        path = tunes_dir(data_dir) / tune_id / TUNE_FILE
        if not path.is_file():
            raise NotFound(
                f"no tune {tune_id} under {tunes_dir(data_dir)}",
                hint="the id is printed when a tune starts; is --data-dir the same?",
            )
        record: dict[str, Any] = json.loads(path.read_text())
        return record

    @property
    def tune_id(self) -> str:
        return self.folder.name

    def _read(self) -> None:
        path = self.folder / JOURNAL_FILE
        if not path.is_file():
            return
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill while it was written
            if entry.get("kind") == "measurement":
                measurement = Measurement.from_json(entry)
                self.measurements[(measurement.candidate_id, measurement.rung)] = measurement
            elif entry.get("kind") == "start":
                self.starts.append(
                    StartRecord(entry["candidate_id"], float(entry["seconds"]), entry.get("failed_reason"))
                )

    def _append(self, entry: dict[str, Any]) -> None:
        with (self.folder / JOURNAL_FILE).open("a", encoding="utf-8") as journal:
            journal.write(json.dumps(entry) + "\n")
            journal.flush()
            os.fsync(journal.fileno())

    def add_measurement(self, measurement: Measurement) -> None:
        self._append(measurement.to_json())
        self.measurements[(measurement.candidate_id, measurement.rung)] = measurement

    def add_start(self, record: StartRecord) -> None:
        entry = {"kind": "start", "candidate_id": record.candidate_id, "seconds": record.seconds}
        if record.failed_reason is not None:
            entry["failed_reason"] = record.failed_reason
        self._append(entry)
        self.starts.append(record)

    def failed_start(self, candidate_id: str) -> str | None:
        for record in self.starts:
            if record.candidate_id == candidate_id and record.failed_reason is not None:
                return record.failed_reason
        return None

    def record_dir(self, candidate_id: str, rung: int) -> Path:
        return self.folder / "runs" / candidate_id / f"rung-{rung}"

    @property
    def spent_s(self) -> float:
        """Seconds spent so far, over every session of this tune: starts and measurements."""
        starts = sum(record.seconds for record in self.starts)
        return starts + sum(measurement.duration_s for measurement in self.measurements.values())
