"""Start ``modelyard tune`` from the console (``POST /api/v1/tunes``).

A tune is a client of the server (``tune/``, docs/tune.md): the server starts it as its own child
process, the CLI with the server's URL and data directory, so it signs in with the CLI token and
keeps its state in ``<data-dir>/tunes/<id>/``, where ``GET /api/v1/tunes`` lists it. Every field
is checked here first, with the tune's own parsers, and a bad one is a ``TuneFieldInvalid`` whose
``details.field`` names the form field; what only the tune can check (a backend's versions, the
draft model) comes back from the child's own one-line error, before its tune id is known.

    started = await start_tune(context_settings, database, TuneStart(model="qwen", gpus="1xH100",
                               slo="ttft_p95<=500ms"))
    started.tune_id, started.log_path
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field
from sqlalchemy import select

from modelyard.errors import InvalidInput, ModelyardError
from modelyard.estimate import parse_gpu_specs
from modelyard.settings import ENV_DATA_DIR, ENV_URL, Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, ModelFile
from modelyard.tune.journal import tunes_dir
from modelyard.tune.options import parse_duration_s
from modelyard.tune.slo import parse_slos
from modelyard.tune.workloads import BUILTIN_WORKLOADS, load_workload

logger = logging.getLogger(__name__)

# How long the child may take to name its tune (it reads the model and the backends first).
START_TIMEOUT_S = 60.0
LOG_READ_INTERVAL_S = 0.2
MAXIMUM_WORKLOAD_FILE_BYTES = 256 * 1024
_TUNE_LINE = re.compile(r"^tune (?P<tune_id>[0-9a-f]+) \(state in ")
_BUILT_IN_BACKENDS = ("vllm", "sglang")


class TuneStart(BaseModel):
    """The console's form: what ``modelyard tune`` is given."""

    model: str = Field(default="", max_length=256)
    gpus: str = Field(default="", max_length=256)
    backends: str = Field(default="vllm", max_length=256)
    workload: str = Field(default="chat", max_length=64)
    # An uploaded workload file's text (YAML or JSON, docs/tune.md#workloads): used instead of
    # ``workload`` when given.
    workload_file: str | None = Field(default=None, max_length=MAXIMUM_WORKLOAD_FILE_BYTES)
    slo: str = Field(default="", max_length=512)
    # A duration (45m, 2h, 90s); empty: no time budget.
    budget: str | None = Field(default=None, max_length=32)


class TuneFieldInvalid(InvalidInput):
    """One field of the form is wrong: ``details`` names it, so the console shows it there."""

    code = "tune_field_invalid"

    def __init__(self, field: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.details = {"field": field}


@dataclass(frozen=True)
class StartedTune:
    tune_id: str
    log_path: Path
    command: list[str]
    # The tune's process (its own session: a stop of its group ends it).
    pid: int


def _check(field: str, error: ModelyardError) -> TuneFieldInvalid:
    return TuneFieldInvalid(field, error.message, hint=error.hint)


def workload_argument(settings: Settings, body: TuneStart) -> str:
    """The ``--workload`` to give: a built-in's name, or the uploaded file stored by its hash
    under ``<data-dir>/tunes/workloads/`` (checked by the tune's own reader first)."""
    if not body.workload_file:
        if body.workload not in BUILTIN_WORKLOADS:
            raise TuneFieldInvalid(
                "workload",
                f"workload {body.workload!r} is not a built-in one",
                hint=f"choose one of {', '.join(BUILTIN_WORKLOADS)}, or upload a workload file",
            )
        return body.workload
    text = body.workload_file
    folder = tunes_dir(settings.data_dir) / "workloads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_workload(str(path))
    except ModelyardError as error:
        path.unlink(missing_ok=True)
        raise TuneFieldInvalid(
            "workload_file",
            error.message.replace(str(path), "the uploaded file"),
            hint=error.hint or "see docs/tune.md#workloads for the fields",
        ) from error
    return str(path)


def check_fields(settings: Settings, database: Database, body: TuneStart) -> list[str]:
    """The ``modelyard tune`` arguments the form gives, each field checked (``TuneFieldInvalid``)."""
    for field, example in (
        ("model", "a model of the Models page"),
        ("gpus", "1xH100"),
        ("slo", "ttft_p95<=500ms"),
    ):
        if not getattr(body, field).strip():
            raise TuneFieldInvalid(field, f"{field} is empty", hint=f"e.g. {example}")
    with database.session() as session:
        model = session.scalar(select(ModelFile).where(ModelFile.name == body.model))
        custom = set(session.scalars(select(CustomBackend.name)))
    if model is None:
        raise TuneFieldInvalid(
            "model", f"the server has no model {body.model!r}", hint="add it on the Models page"
        )
    try:
        if not parse_gpu_specs(body.gpus):
            raise InvalidInput("no GPU named", hint="e.g. 2xH100 or 1x80GB")
    except ModelyardError as error:
        raise _check("gpus", error) from error
    names = [name.strip() for name in body.backends.split(",") if name.strip()]
    unknown = [name for name in names if name not in _BUILT_IN_BACKENDS and name not in custom]
    if not names or unknown:
        raise TuneFieldInvalid(
            "backends",
            f"no backend {', '.join(unknown)} on this server" if unknown else "no backend named",
            hint="e.g. vllm,sglang (see the Backends page)",
        )
    try:
        parse_slos(body.slo)
    except ModelyardError as error:
        raise _check("slo", error) from error
    budget = (body.budget or "").strip()
    if budget:
        try:
            parse_duration_s(budget)
        except ModelyardError as error:
            raise _check("budget", error) from error
    words = [body.model, "--gpus", body.gpus, "--backends", ",".join(names)]
    words += ["--workload", workload_argument(settings, body), "--slo", body.slo]
    if budget:
        words += ["--budget", budget]
    return words


async def start_tune(settings: Settings, database: Database, body: TuneStart) -> StartedTune:
    """Check the form, start the tune as a child process, and wait until it names its tune (or
    fails: its one-line error, as ``InvalidInput``). Its output goes to a log file, not to a
    pipe of the server, so it runs on when the server stops (and ``--resume`` goes on after that)."""
    words = await asyncio.to_thread(check_fields, settings, database, body)
    command = [sys.executable, "-m", "modelyard.cli.main", "tune", *words]
    folder = tunes_dir(settings.data_dir) / "started"
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{hashlib.sha256(os.urandom(16)).hexdigest()[:12]}.log"
    environment = {**os.environ, ENV_URL: settings.server_url, ENV_DATA_DIR: str(settings.data_dir)}
    environment["NO_COLOR"] = "1"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=environment,
            start_new_session=True,
        )
    waiter = asyncio.create_task(process.wait())
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
    tune_id = None
    while tune_id is None and not waiter.done() and asyncio.get_running_loop().time() < deadline:
        # The child names its tune on its first line, once it has read the model and backends.
        await asyncio.wait({waiter}, timeout=LOG_READ_INTERVAL_S)
        tune_id = _tune_id(log_path.read_text(encoding="utf-8", errors="replace"))
    if tune_id is None:
        if not waiter.done():
            process.kill()
        await waiter
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        message = next((line for line in reversed(lines) if line.strip()), "the tune ended before it started")
        raise InvalidInput(
            f"the tune did not start: {message.removeprefix('Error: ')}",
            hint="check the fields; the same command in a terminal says more: modelyard tune "
            + " ".join(words),
        )
    waiter.cancel()
    logger.info("tune %s started from the console (pid %s), log %s", tune_id, process.pid, log_path)
    return StartedTune(tune_id, log_path, ["modelyard", "tune", *words], process.pid)


def _tune_id(text: str) -> str | None:
    for line in text.splitlines():
        match = _TUNE_LINE.match(line.strip())
        if match is not None:
            return match["tune_id"]
    return None
