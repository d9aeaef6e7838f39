"""CLI: the report side of ``modelyard bench``: compare, report, search, prompts.

    modelyard bench compare runs/vllm runs/sglang --html compare.html
    modelyard bench report runs/vllm/result.json --out runs/vllm/report.html
    modelyard bench search --base-url URL --model qwen --find slo --request-rate --start 1 \\
        --slo-ttft-ms 500 --slo-tpot-ms 50 --out runs/qwen-slo
    modelyard bench prompts --dataset random --tokenizer /models/qwen --input-tokens 512 --out work.jsonl

``cli/bench.py`` calls ``register(bench_app)``; these commands only parse, call
``modelyard.bench`` and print.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import typer

from modelyard.cli.context import stderr, stdout
from modelyard.errors import InvalidInput

if TYPE_CHECKING:
    # Imported where used: `modelyard bench --help` does not load the bench.
    from rich.table import Table

    from modelyard.bench.records import LoadKind, RunResult
    from modelyard.bench.search import SearchOutcome, SearchStep


def compare_command(
    results: list[Path] = typer.Argument(
        ..., help="result.json files (or their run directories), baseline first."
    ),
    labels: list[str] = typer.Option(
        [], "--label", help="A name per result, in order (default: engine and version)."
    ),
    html_path: Path | None = typer.Option(None, "--html", help="Also write the comparison as an HTML page."),
) -> None:
    """Runs side by side: per load, each figure and its ratio to the first run."""
    from modelyard.bench.compare import comparison_table, render_comparison, workload_differences
    from modelyard.bench.report_html import load_run

    if labels and len(labels) != len(results):
        raise InvalidInput(
            f"--label was given {len(labels)} times for {len(results)} results; give one per result"
        )
    runs = [load_run(path, label=labels[index] if labels else None) for index, path in enumerate(results)]
    for line in workload_differences(runs):
        stderr.print(f"[yellow]workloads differ:[/yellow] {line}", highlight=False)
    stdout.print(comparison_table(runs))
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_comparison(runs), encoding="utf-8")
        stderr.print(f"wrote {html_path}", highlight=False)


def report_command(
    result: Path = typer.Argument(..., help="A result.json (or its run directory)."),
    out: Path | None = typer.Option(
        None, "--out", help="The HTML file (default: report.html beside the result)."
    ),
    label: str | None = typer.Option(None, "--label", help="A name for the run in the page."),
) -> None:
    """Write a run's self-contained HTML report (plots work offline)."""
    from modelyard.bench.report_html import write_report

    result_path = result / "result.json" if result.is_dir() else result
    written = write_report(result_path, out or result_path.parent / "report.html", label=label)
    stdout.print(str(written), highlight=False)


def _steps_table(steps: list[SearchStep], load_kind: LoadKind) -> Table:
    from rich.table import Table

    table = Table(title="search steps, in the order measured")
    for header in ("load", "throughput", "SLO attainment", "valid", "passed"):
        table.add_column(header, justify="right")
    for step in steps:
        table.add_row(
            f"{step.load:g}" + (" req/s" if load_kind == "rate" else ""),
            f"{step.throughput_per_s:,.1f} {step.throughput_unit}",
            "-" if step.attainment is None else f"{step.attainment:.1%}",
            "yes" if step.valid else "no",
            "yes" if step.passed else "no",
        )
    return table


def search_command(
    base_url: str = typer.Option(..., "--base-url", help="The server root or its /v1 URL."),
    model: str = typer.Option(..., "--model", help="The model name to send."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="MODELYARD_BENCH_API_KEY"),
    find: str = typer.Option("knee", "--find", help="knee (saturation) or slo (highest load meeting SLOs)."),
    request_rate: bool = typer.Option(False, "--request-rate", help="Search request rates (open loop)."),
    start: float = typer.Option(1.0, "--start", help="The first load tried."),
    max_load: float = typer.Option(1024.0, "--max-load", help="Never go above this load."),
    tolerance: float = typer.Option(0.05, "--tolerance", help="Stop bisecting at this relative width."),
    max_steps: int = typer.Option(16, "--max-steps", help="Most load points measured."),
    attainment: float = typer.Option(
        0.99, "--attainment", help="SLO search: share of requests that must meet."
    ),
    slo_ttft_ms: float | None = typer.Option(None, "--slo-ttft-ms"),
    slo_tpot_ms: float | None = typer.Option(None, "--slo-tpot-ms"),
    slo_e2el_ms: float | None = typer.Option(None, "--slo-e2el-ms"),
    num_requests: int = typer.Option(100, "--num-requests", help="Measured requests per load point."),
    warmup_requests: int = typer.Option(0, "--warmup-requests"),
    endpoint: str = typer.Option("chat", "--endpoint", help="chat or completions."),
    input_tokens: int = typer.Option(128, "--input-tokens"),
    output_tokens: int = typer.Option(128, "--output-tokens"),
    dataset: str = typer.Option("random", "--dataset", help="random, shared-prefix, sharegpt, builtin."),
    dataset_path: str | None = typer.Option(None, "--dataset-path"),
    prompts_file: str | None = typer.Option(None, "--prompts-file"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer directory."),
    seed: int = typer.Option(0, "--seed"),
    server_metrics: bool = typer.Option(True, "--server-metrics/--no-server-metrics", help="Poll /metrics."),
    out: Path | None = typer.Option(
        None, "--out", help="Directory for search.json, result.json, report.html."
    ),
) -> None:
    """Find the saturation knee, or the highest load meeting SLOs (bracket, then bisect)."""
    from modelyard.bench import runner
    from modelyard.bench.records import EndpointKind, RunConfig, RunResult, SloTargets
    from modelyard.bench.report_html import write_report
    from modelyard.bench.search import (
        SearchSettings,
        runner_measure,
        search_saturation_knee,
        search_slo_load,
    )
    from modelyard.bench.server_metrics import metrics_url_for
    from modelyard.bench.server_poller import ServerMetricsObserver

    if find not in ("knee", "slo"):
        raise InvalidInput(f"--find {find!r} is not knee or slo")
    if endpoint not in get_args(EndpointKind):
        raise InvalidInput(f"--endpoint {endpoint!r} is not one of {', '.join(get_args(EndpointKind))}")
    load_kind: LoadKind = "rate" if request_rate else "concurrency"
    config = RunConfig(
        base_url=base_url,
        model=model,
        endpoint=endpoint,  # type: ignore[arg-type]
        load_kind=load_kind,
        load_values=[start],
        num_requests=num_requests,
        warmup_requests=warmup_requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        dataset=dataset,
        dataset_path=dataset_path,
        prompts_file=prompts_file,
        tokenizer_path=tokenizer,
        seed=seed,
        slo=SloTargets(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, e2el_ms=slo_e2el_ms),
        api_key_given=bool(api_key),
    )
    if find == "slo" and config.slo.is_empty():
        raise InvalidInput(
            "--find slo needs SLO targets", hint="give --slo-ttft-ms, --slo-tpot-ms or --slo-e2el-ms"
        )
    settings = SearchSettings(
        load_kind=load_kind,
        start_load=start,
        max_load=max_load,
        tolerance_ratio=tolerance,
        max_steps=max_steps,
        required_attainment=attainment,
    )
    metrics_url = metrics_url_for(base_url)
    factories = (lambda: ServerMetricsObserver(metrics_url),) if server_metrics else ()
    measure = runner_measure(config, api_key=api_key, observer_factories=factories)
    search = search_slo_load if find == "slo" else search_saturation_knee

    async def run() -> tuple[SearchOutcome, RunResult]:
        engine = await runner.detect_engine(config, api_key)
        outcome = await search(measure, settings)
        result = RunResult(
            config=config,
            engine=engine,
            hardware=runner.client_hardware(),
            run_id=uuid.uuid4().hex[:12],
            created_at=datetime.now(UTC).isoformat(),
            points=outcome.ordered_results(),
        )
        return outcome, result

    with stderr.status(f"searching for the {'SLO limit' if find == 'slo' else 'saturation knee'}"):
        outcome, result = asyncio.run(run())
    stdout.print(_steps_table(outcome.steps, load_kind))
    found = outcome.found_load
    stdout.print(f"found: {'-' if found is None else f'{found:g}'} ({outcome.reason})", highlight=False)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "search.json").write_text(json.dumps(outcome.to_json(), indent=2))
        (out / "result.json").write_text(result.to_json())
        write_report(out / "result.json", out / "report.html")
        stderr.print(f"wrote {out / 'search.json'}, result.json and report.html", highlight=False)


def prompts_command(
    out: Path = typer.Option(..., "--out", help="The prompts file to write (JSON lines)."),
    dataset: str = typer.Option("random", "--dataset", help="random, shared-prefix, sharegpt, builtin."),
    num_prompts: int = typer.Option(100, "--num-prompts"),
    input_tokens: int = typer.Option(128, "--input-tokens"),
    output_tokens: int | None = typer.Option(
        128, "--output-tokens", help="ShareGPT: omit to use the answers."
    ),
    input_range_ratio: float = typer.Option(
        0.0, "--input-range-ratio", help="Random: lengths within +-ratio."
    ),
    num_prefixes: int = typer.Option(4, "--num-prefixes", help="Shared-prefix: distinct prefixes."),
    prefix_tokens: int | None = typer.Option(
        None, "--prefix-tokens", help="Shared-prefix: tokens per prefix."
    ),
    dataset_path: Path | None = typer.Option(None, "--dataset-path", help="The ShareGPT file."),
    endpoint: str = typer.Option("chat", "--endpoint", help="chat or completions (how lengths are counted)."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer directory."),
    base_url: str | None = typer.Option(None, "--base-url", help="Count with this engine's /tokenize."),
    model: str | None = typer.Option(None, "--model", help="The model name, with --base-url."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Build a prompt set once and save it, to give several engines identical work (--prompts-file)."""
    from modelyard.bench.datasets import (
        DATASET_NAMES,
        DatasetSpec,
        build_prompts,
        open_token_counter,
        save_prompts,
    )
    from modelyard.bench.records import EndpointKind

    if dataset not in DATASET_NAMES or dataset == "file":
        raise InvalidInput(f"--dataset {dataset!r} is not one of random, shared-prefix, sharegpt, builtin")
    if endpoint not in get_args(EndpointKind):
        raise InvalidInput(f"--endpoint {endpoint!r} is not one of {', '.join(get_args(EndpointKind))}")
    spec = DatasetSpec(
        name=dataset,  # type: ignore[arg-type]
        num_prompts=num_prompts,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        seed=seed,
        endpoint=endpoint,  # type: ignore[arg-type]
        path=dataset_path,
        input_range_ratio=input_range_ratio,
        num_prefixes=num_prefixes,
        prefix_tokens=prefix_tokens,
    )
    counter = open_token_counter(tokenizer_path=tokenizer, base_url=base_url, model=model)
    prompts = build_prompts(spec, counter)
    save_prompts(prompts, out, description=f"{dataset} seed {seed}")
    requested = [p for p in prompts if p.requested_input_tokens is not None]
    exact = sum(1 for p in requested if p.achieved_input_tokens == p.requested_input_tokens)
    counted = [p.achieved_input_tokens for p in prompts if p.achieved_input_tokens is not None]
    summary = f"wrote {len(prompts)} prompts to {out}"
    if requested:
        summary += f"; {exact} of {len(requested)} at exactly their requested input length"
    if counted:
        summary += f"; input tokens {min(counted)}..{max(counted)} (mean {sum(counted) / len(counted):.1f})"
    stdout.print(summary, highlight=False)


def register(bench_app: typer.Typer) -> None:
    """Add compare, report, search and prompts to the ``bench`` sub-app."""
    bench_app.command("compare")(compare_command)
    bench_app.command("report")(report_command)
    bench_app.command("search")(search_command)
    bench_app.command("prompts")(prompts_command)
