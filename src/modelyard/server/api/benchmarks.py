"""``/api/v1/benchmarks``: benchmark runs against this server's deployments, through its gateway.

POST starts a run in a process of its own (``services/benchmarks.py``) with the console's gateway
key; GET shows its state and progress while it runs, and its figures, HTML report (the same as
``modelyard bench report``) and output once it is done; ``compare`` puts two or more side by side.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import HTMLResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from modelyard.bench import task
from modelyard.errors import InvalidInput
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import benchmarks
from modelyard.services.console_key import console_key_file, ensure_console_key

router = APIRouter(tags=["benchmarks"])


class BenchmarkCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deployment: str = Field(min_length=1)
    concurrency: list[int] = Field(default_factory=lambda: [1], description="streams, one load point each")
    input_tokens: int = 128
    output_tokens: int = 128
    num_requests: int | None = Field(default=50, description="per load point")
    duration_s: float | None = Field(default=None, description="per load point, instead of a count")
    label: str | None = None


def _start(session: Session, context: ServerContext, body: BenchmarkCreate) -> tuple[str, bool]:
    key, created = ensure_console_key(session, console_key_file(context.settings.data_dir))
    request = benchmarks.BenchmarkRequest(**body.model_dump())
    started = benchmarks.start_benchmark(context.settings, session, request, key)
    return started.run_id, created


@router.get("/benchmarks")
async def list_benchmarks(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await run_in_threadpool(benchmarks.list_runs, context.settings)


@router.post("/benchmarks", status_code=201)
async def start_benchmark(
    body: BenchmarkCreate, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    run_id, key_created = await in_session(context, _start, context, body)
    if key_created:
        context.key_cache.invalidate()
    return await run_in_threadpool(benchmarks.describe_run, context.settings, run_id)


def _comparison(context: ServerContext, run_ids: list[str]) -> str:
    from modelyard.bench.compare import render_comparison
    from modelyard.bench.report_html import load_run

    runs = []
    for run_id in run_ids:
        path = benchmarks.run_file(context.settings, run_id, task.RESULT_FILE)
        runs.append(load_run(path, label=run_id))
    return render_comparison(runs)


@router.get("/benchmarks/compare", response_class=HTMLResponse)
async def compare_benchmarks(
    runs: str = Query(description="two or more run ids, comma-separated"),
    context: ServerContext = Depends(server_context),
) -> HTMLResponse:
    run_ids = [run_id for run_id in runs.split(",") if run_id]
    if len(run_ids) < 2 or len(set(run_ids)) != len(run_ids):
        raise InvalidInput(f"compare needs two or more different runs, got {runs!r}", hint="runs=ID1,ID2")
    return HTMLResponse(await run_in_threadpool(_comparison, context, run_ids))


@router.get("/benchmarks/{run_id}")
async def show_benchmark(run_id: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await run_in_threadpool(benchmarks.describe_run, context.settings, run_id)


@router.get("/benchmarks/{run_id}/report", response_class=HTMLResponse)
async def benchmark_report(run_id: str, context: ServerContext = Depends(server_context)) -> HTMLResponse:
    path = await run_in_threadpool(benchmarks.run_file, context.settings, run_id, task.REPORT_FILE)
    return HTMLResponse(path.read_text(encoding="utf-8"))


@router.get("/benchmarks/{run_id}/output", response_class=PlainTextResponse)
async def benchmark_output(
    run_id: str, context: ServerContext = Depends(server_context)
) -> PlainTextResponse:
    path = await run_in_threadpool(benchmarks.run_file, context.settings, run_id, benchmarks.OUTPUT_FILE)
    return PlainTextResponse(path.read_text(encoding="utf-8", errors="replace"))


@router.delete("/benchmarks/{run_id}", status_code=204)
async def remove_benchmark(run_id: str, context: ServerContext = Depends(server_context)) -> Response:
    await run_in_threadpool(benchmarks.remove_run, context.settings, run_id)
    return Response(status_code=204)
