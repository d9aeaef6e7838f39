"""``/api/v1/tunes``: the tunes of this server's data directory (``modelyard tune`` runs in the
CLI and keeps its state in ``<data-dir>/tunes/<id>/``; ``tune/listing.py`` reads it), for the
console's tune pages. Read-only: a tune is started, or resumed, with the command each answer gives.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, status
from starlette.concurrency import run_in_threadpool

from modelyard.server.context import ServerContext, server_context
from modelyard.services.tune_starts import TuneStart, start_tune
from modelyard.tune.listing import list_tunes, read_tune

router = APIRouter(tags=["tunes"])


@router.get("/tunes")
async def tunes(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    """Every tune, the most recently changed first: ``tune_id``, ``model``, ``gpus``, ``workload``,
    ``slos``, ``state`` (``measuring``: no report yet; ``reported``), ``runs``, ``starts``,
    ``failed_starts``, ``spent_s``, ``winner`` (label) and ``winner_throughput`` (output tokens/s),
    ``gain_over_defaults`` (ratio), ``stopped_reason``, ``resume_command``, ``updated_at`` (Unix s)."""
    return await run_in_threadpool(list_tunes, context.settings.data_dir)


@router.get("/tunes/{tune_id}")
async def tune(tune_id: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    """One tune: the summary of ``GET /tunes``, ``arguments`` and ``cli`` (what defines it, from
    its ``tune.json``), and ``report`` (``report.json`` as docs/tune.md describes it; null until a
    session has written it)."""
    return await run_in_threadpool(read_tune, context.settings.data_dir, tune_id)


@router.post("/tunes", status_code=status.HTTP_202_ACCEPTED)
async def start(body: TuneStart, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    """Start ``modelyard tune`` on this server's host with the form's fields: ``model``, ``gpus``
    (as the estimator takes them), ``backends``, ``workload`` (a built-in's name) or
    ``workload_file`` (a workload file's text), ``slo``, ``budget``. A bad field is 400
    ``tune_field_invalid`` with ``details.field``; 202 ``{tune_id, log_path, command, pid}`` once
    the tune has named itself (it is then listed by ``GET /tunes``)."""
    started = await start_tune(context.settings, context.database, body)
    return {
        "tune_id": started.tune_id,
        "log_path": str(started.log_path),
        "command": started.command,
        "pid": started.pid,
    }
