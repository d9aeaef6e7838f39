"""CLI: ``modelyard bench``: benchmark any OpenAI-compatible endpoint; no modelyard server needed.

    modelyard bench run --base-url http://127.0.0.1:8000 --model qwen --concurrency 1,16,64 --num-requests 200
    modelyard bench run --base-url URL --model qwen --request-rate 5,10 --arrival gamma --burstiness 0.5 \\
        --duration-s 60 --warmup-s 5 --slo-ttft-ms 500 --slo-tpot-ms 50 --repeats 3 --out runs/qwen
    modelyard bench reference-server --flavor sglang --ttft-ms 40 --itl-ms 4 --port 30000
    modelyard bench selftest

``run`` draws live progress on stderr, prints the summary table on stdout and writes the outputs
(``result.json``, ``requests.jsonl``, ``points.csv``, ``prompts.jsonl``) under ``--out``. The exit
status is 1 when a point is invalid (the client fell behind, or every request failed).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import typer

from modelyard.cli.context import stderr, stdout
from modelyard.errors import InvalidInput

if TYPE_CHECKING:
    # Imported where used: `modelyard bench --help` does not load the bench (pydantic and all).
    from rich.progress import Progress, TaskID

    from modelyard.bench.records import LoadPoint, LoadPointResult, RequestRecord
    from modelyard.bench.runner import PointObserver

bench_app = typer.Typer(
    name="bench",
    help="Benchmark OpenAI-compatible endpoints (vLLM, SGLang, transformers serve, the gateway).",
    no_args_is_help=True,
)


def _numbers(text: str | None, *, option: str) -> list[float]:
    if not text:
        return []
    try:
        values = [float(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as error:
        raise InvalidInput(
            f"{option} takes comma-separated numbers, got {text!r}", hint=f"{option} 1,16,64"
        ) from error
    return values


def _gpu_indices(text: str) -> list[int]:
    parts = [part for part in text.replace(" ", "").split(",") if part]
    if not parts or not all(part.isdigit() for part in parts):
        raise InvalidInput(
            f"--gpu-ids takes comma-separated GPU indices, got {text!r}",
            hint="--gpu-ids 0,1 (the indices `modelyard gpus` or nvidia-smi shows)",
        )
    return [int(part) for part in parts]


# A start time further ahead than this is more likely a typo than a plan.
START_AT_HORIZON_S = 3600.0


def _unix_seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _start_time(text: str) -> float:
    """``--start-at``: UNIX seconds, or an ISO 8601 time with its UTC offset; within the hour."""
    at = _unix_seconds(text)
    if at is None:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as error:
            raise InvalidInput(
                f"--start-at takes UNIX seconds or an ISO 8601 time, got {text!r}",
                hint='--start-at "$(date -d +15sec +%s)" or --start-at 2026-11-30T19:00:00+00:00',
            ) from error
        if moment.tzinfo is None:
            raise InvalidInput(
                f"--start-at {text!r} has no UTC offset, so which clock it means is unclear",
                hint=f"add the offset, e.g. {text}+00:00 for UTC",
            )
        at = moment.timestamp()
    ahead_s = at - time.time()
    if ahead_s > START_AT_HORIZON_S:
        raise InvalidInput(
            f"--start-at is {ahead_s / 3600:.1f} h away; it is meant to start several clients "
            "together within the next hour",
            hint="give a time a few seconds after every client will have built its prompts",
        )
    return at


class _RichProgress:
    """The ``ProgressListener`` of the CLI: one bar per load point, on stderr.

    The bar is moved at most every 100 ms: a rich update per request would cost the client about
    a third of its own CPU at high rates.
    """

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        self._done = 0
        self._shown_at_s = 0.0

    def point_started(self, point: LoadPoint, total_requests: int | None, duration_s: float | None) -> None:
        self._done = 0
        description = point.label + (
            f" for {duration_s:g} s" if total_requests is None and duration_s else ""
        )
        self._task = self._progress.add_task(description, total=total_requests)

    def request_finished(self, record: RequestRecord) -> None:
        self._done += 1
        now_s = time.monotonic()
        if self._task is not None and now_s - self._shown_at_s >= 0.1:
            self._shown_at_s = now_s
            self._progress.update(self._task, completed=self._done)

    def point_finished(self, result: LoadPointResult) -> None:
        if self._task is None:
            return
        state = "ok" if result.valid else "INVALID"
        ttft = result.metrics["ttft_ms"].median
        text = f"{result.point.label}: {result.request_throughput_per_s:.2f} req/s"
        text += f", TTFT p50 {ttft:.1f} ms" if ttft is not None else ""
        text += f", {result.requests_failed} failed, {state}"
        self._progress.update(self._task, description=text, completed=self._done)


@bench_app.command("run")
def run_command(
    base_url: str = typer.Option(..., "--base-url", help="The server root or its /v1 URL."),
    model: str = typer.Option(..., "--model", help="The model name to send."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="MODELYARD_BENCH_API_KEY", help="Bearer key."
    ),
    endpoint: str = typer.Option("chat", "--endpoint", help="chat or completions."),
    concurrency: str | None = typer.Option(None, "--concurrency", help="Closed loop: e.g. 1,16,64."),
    request_rate: str | None = typer.Option(None, "--request-rate", help="Open loop, requests/s: e.g. 5,10."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson, gamma or constant (open loop)."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape: 1 Poisson, <1 burstier."),
    num_requests: int | None = typer.Option(None, "--num-requests", help="Measured requests per point."),
    duration_s: float | None = typer.Option(None, "--duration-s", help="Measured seconds per point."),
    warmup_requests: int = typer.Option(
        0, "--warmup-requests", help="Excluded requests at each point's start."
    ),
    warmup_s: float = typer.Option(0.0, "--warmup-s", help="Excluded seconds at each point's start."),
    ramp_up_s: float = typer.Option(0.0, "--ramp-up-s", help="Reach the full load over this time."),
    input_tokens: int = typer.Option(128, "--input-tokens"),
    output_tokens: int = typer.Option(128, "--output-tokens"),
    dataset: str = typer.Option("random", "--dataset", help="random, shared-prefix, sharegpt, builtin."),
    dataset_path: str | None = typer.Option(None, "--dataset-path", help="The ShareGPT JSON/JSONL file."),
    prompts_file: str | None = typer.Option(None, "--prompts-file", help="Replay a saved prompts.jsonl."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer directory."),
    seed: int = typer.Option(0, "--seed"),
    repeats: int = typer.Option(1, "--repeats", help="Run each point this many times."),
    slo_ttft_ms: float | None = typer.Option(None, "--slo-ttft-ms"),
    slo_tpot_ms: float | None = typer.Option(None, "--slo-tpot-ms"),
    slo_e2el_ms: float | None = typer.Option(None, "--slo-e2el-ms"),
    max_send_lag_ms: float = typer.Option(10.0, "--max-send-lag-ms", help="p99 send lag that invalidates."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="Per-request timeout."),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Fixed output lengths."),
    label: str | None = typer.Option(None, "--label", help="A name for this configuration."),
    engine: str | None = typer.Option(None, "--engine", help="vllm, sglang, transformers (else detected)."),
    server_metrics: bool = typer.Option(True, "--server-metrics/--no-server-metrics", help="Poll /metrics."),
    metrics_url: str | None = typer.Option(
        None,
        "--metrics-url",
        help="The engine's /metrics to poll (default: the --base-url's); give the engine's own "
        "when --base-url is a gateway.",
    ),
    gpus: bool = typer.Option(True, "--gpus/--no-gpus", help="Sample this host's GPUs (NVML)."),
    gpu_ids: str | None = typer.Option(
        None, "--gpu-ids", help="Only these GPUs, e.g. 0,1: the engine's (default: every GPU of this host)."
    ),
    metrics_interval_s: float = typer.Option(1.0, "--metrics-interval-s", help="Polling interval."),
    start_at: str | None = typer.Option(
        None,
        "--start-at",
        help="Hold the first request until this time (UNIX seconds or ISO 8601 with offset), to "
        "start several clients together; prompts are built before.",
    ),
    out: Path | None = typer.Option(None, "--out", help="Directory for the output files."),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON instead of the table."),
) -> None:
    """Run a benchmark sweep against an endpoint and report it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from modelyard.bench.outputs import summary_table, write_outputs
    from modelyard.bench.records import ArrivalKind, EndpointKind, EngineInfo, RunConfig, SloTargets
    from modelyard.bench.runner import run_benchmark

    concurrencies = _numbers(concurrency, option="--concurrency")
    rates = _numbers(request_rate, option="--request-rate")
    if bool(concurrencies) == bool(rates):
        raise InvalidInput(
            "give either --concurrency or --request-rate (one of them)", hint="--concurrency 1,16"
        )
    if endpoint not in get_args(EndpointKind):
        raise InvalidInput(f"--endpoint {endpoint!r} is not one of {', '.join(get_args(EndpointKind))}")
    if arrival not in get_args(ArrivalKind):
        raise InvalidInput(f"--arrival {arrival!r} is not one of {', '.join(get_args(ArrivalKind))}")
    if num_requests is None and duration_s is None:
        num_requests = 100
    config = RunConfig(
        base_url=base_url,
        model=model,
        endpoint=endpoint,  # type: ignore[arg-type]
        load_kind="concurrency" if concurrencies else "rate",
        load_values=concurrencies or rates,
        arrival=arrival,  # type: ignore[arg-type]
        burstiness=burstiness,
        num_requests=num_requests,
        duration_s=duration_s,
        warmup_requests=warmup_requests,
        warmup_s=warmup_s,
        ramp_up_s=ramp_up_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        dataset=dataset,
        dataset_path=dataset_path,
        prompts_file=prompts_file,
        seed=seed,
        repeats=repeats,
        ignore_eos=ignore_eos,
        request_timeout_s=timeout_s,
        max_send_lag_ms=max_send_lag_ms,
        slo=SloTargets(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, e2el_ms=slo_e2el_ms),
        tokenizer_path=tokenizer,
        start_at_unix_s=_start_time(start_at) if start_at is not None else None,
    )
    observer_factories: list[Callable[[], PointObserver]] = []
    if server_metrics:
        from modelyard.bench.server_metrics import metrics_url_for
        from modelyard.bench.server_poller import ServerMetricsObserver

        polled_url = metrics_url or metrics_url_for(base_url)
        observer_factories.append(lambda: ServerMetricsObserver(polled_url, interval_s=metrics_interval_s))
    if gpus:
        from modelyard.bench.gpu_sampler import GpuObserver

        indices = _gpu_indices(gpu_ids) if gpu_ids else None
        observer_factories.append(lambda: GpuObserver(interval_s=metrics_interval_s, gpu_indices=indices))
    engine_hint = EngineInfo(base_url=base_url, served_model=model, engine=engine, label=label)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=False) as progress:
        outcome = run_benchmark(
            config,
            api_key=api_key,
            engine=engine_hint,
            progress=_RichProgress(progress),
            observer_factories=observer_factories,
        )
    if out is not None:
        paths = write_outputs(outcome, out)
        stderr.print(f"wrote {paths.result_json}, {paths.requests_jsonl.name}, {paths.points_csv.name}")
    if as_json:
        sys.stdout.write(outcome.result.to_json() + "\n")
    else:
        stdout.print(summary_table(outcome.result))
    if not outcome.result.valid:
        stderr.print(f"[red]invalid run:[/red] {outcome.result.invalid_reason}", highlight=False)
        raise typer.Exit(1)


@bench_app.command(
    "reference-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def reference_server_command(ctx: typer.Context) -> None:
    """The reference server (engine double); takes the flags of python -m modelyard.bench.reference_server."""
    import os

    from modelyard.bench.reference import parse_reference_argv
    from modelyard.bench.reference.server import run_reference_program

    raise typer.Exit(run_reference_program(parse_reference_argv(list(ctx.args), os.environ)))


@bench_app.command("selftest")
def selftest_command(
    ttft_ms: float = typer.Option(20.0, "--ttft-ms", help="The reference server's TTFT."),
    itl_ms: float = typer.Option(5.0, "--itl-ms", help="The reference server's per-token latency."),
    max_rate_per_s: float = typer.Option(6400.0, "--max-rate", help="Stop the capacity search here."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Measure this client's own overhead on this machine against the reference server."""
    from modelyard.bench.selftest import SelftestConfig, run_selftest

    with stderr.status("measuring the client against the reference server"):
        result = run_selftest(SelftestConfig(ttft_ms=ttft_ms, itl_ms=itl_ms, max_rate_per_s=max_rate_per_s))
    if as_json:
        sys.stdout.write(json.dumps(asdict(result), indent=2) + "\n")
        return

    def figure(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value:+.2f} {unit}"

    stdout.print(f"TTFT overhead: {figure(result.ttft_overhead_ms, 'ms')} (configured {ttft_ms:g} ms)")
    stdout.print(f"ITL overhead:  {figure(result.itl_overhead_ms, 'ms')} (configured {itl_ms:g} ms)")
    stdout.print(f"TPOT overhead: {figure(result.tpot_overhead_ms, 'ms')}")
    rate = result.max_sustained_rate_per_s
    chunks = result.chunks_per_s_at_max
    stdout.print(f"highest sustained rate: {'-' if rate is None else f'{rate:g} req/s'}", highlight=False)
    stdout.print(
        f"streamed chunks at that rate: {'-' if chunks is None else f'{chunks:,.0f}/s'}", highlight=False
    )
    stdout.print(f"stopped because: {result.stop_reason}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard bench`` (and the report commands, where that module exists) to the root app."""
    if importlib.util.find_spec("modelyard.cli.bench_reports") is not None:
        bench_reports = importlib.import_module("modelyard.cli.bench_reports")
        bench_reports.register(bench_app)
    app.add_typer(bench_app, name="bench")
