"""A benchmark run as one self-contained HTML page, readable offline (plotly.js is inlined once).

The page shows: the run's identity and validity; a table per load point; latency CDFs (TTFT, TPOT,
ITL, E2EL) per load point, from the per-request file when it sits next to the result (else from
the stored percentiles, marked as such); throughput and latency against load; output tokens/s per
user against output tokens/s per GPU; the engine's timelines (/metrics, NVML) and the client-vs-
server TTFT gap.

Usage::

    run = load_run(Path("runs/qwen-vllm/result.json"))   # reads requests.jsonl beside it if there
    Path("report.html").write_text(render_report(run))
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from modelyard.bench.datasets.prompts_file import load_prompts
from modelyard.bench.input_lengths import check_input_lengths, input_lengths_html
from modelyard.bench.metrics import chunk_gaps_ms, tpot_ms
from modelyard.bench.records import BenchPrompt, LoadPointResult, MetricSummary, RequestRecord, RunResult
from modelyard.bench.server_metrics import server_summary_from_series, server_ttft_mean_ms_from_series
from modelyard.errors import InvalidInput, NotFound

logger = logging.getLogger(__name__)

LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT (ms)"),
    ("tpot_ms", "TPOT (ms)"),
    ("itl_ms", "ITL, per chunk (ms)"),
    ("e2el_ms", "E2E latency (ms)"),
)
TIMELINE_PANELS: tuple[tuple[str, str], ...] = (
    ("server_running_requests", "running requests"),
    ("server_waiting_requests", "waiting requests"),
    ("server_kv_cache_usage", "KV cache in use (0-1)"),
    ("server_generation_tokens_per_s", "engine output tokens/s"),
    ("server_prefix_cache_hit_ratio", "prefix cache hit ratio"),
    ("server_preemptions_total", "preemptions (cumulative)"),
    ("server_spec_acceptance_ratio", "speculative acceptance"),
    ("utilization_percent", "GPU utilization (%)"),
    ("memory_used_bytes", "GPU memory used (GiB)"),
    ("power_watts", "GPU power (W)"),
)
SERVER_FIGURES: tuple[tuple[str, str, int], ...] = (
    ("engine_ttft_mean_ms", "engine TTFT mean (ms)", 1),
    ("peak_running_requests", "peak running", 0),
    ("peak_waiting_requests", "peak waiting", 0),
    ("peak_kv_cache_usage", "peak KV cache", 2),
    ("preemptions", "preemptions", 0),
    ("prefix_cache_hit_ratio", "prefix cache hits", 2),
    ("spec_acceptance_ratio", "spec. acceptance", 2),
    ("mean_gpu_utilization_percent", "GPU util. mean (%)", 0),
    ("peak_gpu_memory_used_bytes", "GPU memory peak (GiB)", 1),
    ("mean_gpu_power_watts", "GPU power mean (W)", 0),
)


def color(index: int) -> str:
    """The same color for the same run (or point) in every panel."""
    palette: list[str] = qualitative.Plotly
    return palette[index % len(palette)]


@dataclass
class LoadedRun:
    """A result file, its label, and its per-request records by point index (when found)."""

    label: str
    result: RunResult
    source: Path | None = None
    requests_by_point: dict[int, list[RequestRecord]] = field(default_factory=dict)
    prompts: list[BenchPrompt] = field(default_factory=list)
    """From ``prompts.jsonl`` beside the result, when it is there."""


def run_label(result: RunResult, fallback: str) -> str:
    engine = result.engine
    if engine.label:
        return engine.label
    parts = [engine.engine or fallback, engine.engine_version or ""]
    return " ".join(part for part in parts if part) or fallback


def load_run(path: Path, *, label: str | None = None) -> LoadedRun:
    """Read ``result.json`` (or a directory holding it) and ``requests.jsonl`` beside it."""
    result_path = path / "result.json" if path.is_dir() else path
    if not result_path.is_file():
        raise NotFound(
            f"no benchmark result at {result_path}", hint="give a result.json or its run directory"
        )
    result = RunResult.from_json(result_path.read_bytes())
    fallback = result_path.parent.name if result_path.name == "result.json" else result_path.stem
    run = LoadedRun(label=label or run_label(result, fallback), result=result, source=result_path)
    requests_path = result_path.parent / "requests.jsonl"
    if requests_path.is_file():
        run.requests_by_point = _read_requests(requests_path)
    prompts_path = result_path.parent / "prompts.jsonl"
    if prompts_path.is_file():
        run.prompts = load_prompts(prompts_path)
    return run


def _read_requests(path: Path) -> dict[int, list[RequestRecord]]:
    by_point: dict[int, list[RequestRecord]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            point_index = int(json.loads(line).get("point_index", 0))
            record = RequestRecord.from_json(line)
        except (ValueError, TypeError) as error:
            raise InvalidInput(f"{path} line {number} is not a request record: {error}") from error
        if not record.warmup:
            by_point.setdefault(point_index, []).append(record)
    return by_point


def point_name(point: LoadPointResult) -> str:
    return point.point.label


def request_values(records: Sequence[RequestRecord], metric: str) -> list[float]:
    """Per-request (per-chunk for ITL) values of a latency metric, successful requests only."""
    succeeded = [record for record in records if record.succeeded]
    values: list[float | None]
    if metric == "ttft_ms":
        values = [record.ttft_ms for record in succeeded]
    elif metric == "tpot_ms":
        values = [tpot_ms(record) for record in succeeded]
    elif metric == "e2el_ms":
        values = [record.e2el_ms for record in succeeded]
    elif metric == "itl_ms":
        values = [gap for record in succeeded for gap in chunk_gaps_ms(record)]
    else:
        raise InvalidInput(f"no per-request values for metric {metric!r}")
    return sorted(value for value in values if value is not None)


def summary_points(summary: MetricSummary) -> tuple[list[float], list[float]]:
    """A coarse CDF from stored statistics: (values, cumulative fractions)."""
    pairs = [(summary.min, 0.0), (summary.median, 0.5), (summary.p90, 0.9), (summary.p95, 0.95)]
    pairs += [(summary.p99, 0.99), (summary.max, 1.0)]
    kept = [(value, fraction) for value, fraction in pairs if value is not None]
    return [value for value, _ in kept], [fraction for _, fraction in kept]


def add_cdf(
    figure: go.Figure, run: LoadedRun, index: int, metric: str, name: str, row: int, col: int, line_color: str
) -> None:
    point = run.result.points[index]
    records = run.requests_by_point.get(index)
    if records:
        values = request_values(records, metric)
        if not values:
            return
        fractions = [(position + 1) / len(values) for position in range(len(values))]
        figure.add_trace(
            go.Scatter(
                x=values,
                y=fractions,
                mode="lines",
                name=name,
                legendgroup=name,
                showlegend=(row, col) == (1, 1),
                line={"color": line_color},
            ),
            row=row,
            col=col,
        )
        return
    summary = point.metrics.get(metric)
    if summary is None or summary.count == 0:
        return
    values, fractions = summary_points(summary)
    figure.add_trace(
        go.Scatter(
            x=values,
            y=fractions,
            mode="lines+markers",
            name=f"{name} (percentiles)",
            legendgroup=name,
            showlegend=(row, col) == (1, 1),
            line={"color": line_color},
        ),
        row=row,
        col=col,
    )


def latency_cdf_figure(runs: Sequence[tuple[LoadedRun, list[int]]]) -> go.Figure:
    """One panel per latency metric; one line per (run, point)."""
    figure = make_subplots(rows=2, cols=2, subplot_titles=[title for _, title in LATENCY_METRICS])
    line_number = 0
    for run, indices in runs:
        for index in indices:
            name = point_name(run.result.points[index])
            if len(runs) > 1:
                name = f"{run.label}: {name}"
            line_color = color(line_number)
            line_number += 1
            for position, (metric, _title) in enumerate(LATENCY_METRICS):
                add_cdf(figure, run, index, metric, name, position // 2 + 1, position % 2 + 1, line_color)
    figure.update_yaxes(title_text="fraction of requests", range=[0, 1.02])
    figure.update_layout(title="Latency distributions (CDF)", height=700)
    return figure


def _statistic(point: LoadPointResult, metric: str, statistic: str) -> float | None:
    summary = point.metrics.get(metric)
    return None if summary is None else getattr(summary, statistic)


def gpu_count_of(result: RunResult) -> tuple[int, str]:
    """How many GPUs served the run, and where that came from: the run's hardware, else the GPUs
    NVML sampled during it, else 1 (assumed, and said so)."""
    if result.hardware.gpus:
        return len(result.hardware.gpus), "recorded"
    sampled = {
        series.source
        for point in result.points
        for series in point.timelines
        if series.source.startswith("nvml:")
    }
    if sampled:
        return len(sampled), "sampled by NVML"
    return 1, "not recorded: 1 assumed"


def load_axis_title(runs: Sequence[LoadedRun]) -> str:
    kinds = {point.point.kind for run in runs for point in run.result.points}
    if kinds == {"rate"}:
        return "request rate (req/s)"
    return "concurrency" if kinds == {"concurrency"} else "load"


def load_figure(runs: Sequence[LoadedRun]) -> go.Figure:
    """Throughput and latency against load, one line per run."""
    titles = ["output tokens/s", "requests/s", "TTFT p50 / p99 (ms)", "TPOT p50 / p99 (ms)"]
    figure = make_subplots(rows=2, cols=2, subplot_titles=titles)
    for run_index, run in enumerate(runs):
        points = sorted(run.result.points, key=lambda point: point.point.value)
        loads = [point.point.value for point in points]
        group = run.label
        run_color = color(run_index)
        figure.add_trace(
            go.Scatter(
                x=loads,
                y=[p.output_token_throughput_per_s for p in points],
                name=group,
                legendgroup=group,
                mode="lines+markers",
                line={"color": run_color},
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Scatter(
                x=loads,
                y=[p.request_throughput_per_s for p in points],
                name=group,
                legendgroup=group,
                showlegend=False,
                mode="lines+markers",
                line={"color": run_color},
            ),
            row=1,
            col=2,
        )
        for col, metric in ((1, "ttft_ms"), (2, "tpot_ms")):
            for statistic, dash in (("median", "solid"), ("p99", "dot")):
                values = [_statistic(p, metric, statistic) for p in points]
                figure.add_trace(
                    go.Scatter(
                        x=loads,
                        y=values,
                        name=f"{group} {statistic}",
                        legendgroup=group,
                        showlegend=False,
                        mode="lines+markers",
                        line={"dash": dash, "color": run_color},
                    ),
                    row=2,
                    col=col,
                )
    figure.update_xaxes(title_text=load_axis_title(runs))
    figure.update_layout(title="Throughput and latency against load (dotted: p99)", height=700)
    return figure


def per_user_figure(runs: Sequence[LoadedRun]) -> go.Figure:
    """The serving trade-off: each user's decode speed against what each GPU delivers."""
    figure = go.Figure()
    for run_index, run in enumerate(runs):
        gpus, origin = gpu_count_of(run.result)
        points = sorted(run.result.points, key=lambda point: point.point.value)
        per_user = [_statistic(p, "output_tokens_per_s_per_user", "median") for p in points]
        per_gpu = [
            None if p.output_token_throughput_per_s is None else p.output_token_throughput_per_s / gpus
            for p in points
        ]
        labels = [point_name(p) for p in points]
        figure.add_trace(
            go.Scatter(
                x=per_user,
                y=per_gpu,
                text=labels,
                mode="lines+markers+text",
                textposition="top center",
                name=f"{run.label} ({gpus} GPU, {origin})",
                line={"color": color(run_index)},
            )
        )
    figure.update_layout(
        title="Output tokens/s per user (median) against output tokens/s per GPU",
        xaxis_title="tokens/s per user",
        yaxis_title="tokens/s per GPU",
        height=500,
    )
    return figure


def timeline_figure(run: LoadedRun) -> go.Figure | None:
    """The engine's and the GPUs' timelines, one line per load point (and per GPU)."""
    wanted = [(key, title) for key, title in TIMELINE_PANELS if _has_series(run, key)]
    if not wanted:
        return None
    rows = (len(wanted) + 1) // 2
    figure = make_subplots(rows=rows, cols=2, subplot_titles=[title for _, title in wanted])
    for index, point in enumerate(run.result.points):
        name = point_name(point)
        for position, (key, _title) in enumerate(wanted):
            for series in point.timelines:
                if not series.name.endswith(key):
                    continue
                trace_name = name if series.name == key else f"{name} {series.name.split('_')[0]}"
                figure.add_trace(
                    go.Scatter(
                        x=series.times_s,
                        y=[v / 2**30 for v in series.values] if series.unit == "bytes" else series.values,
                        mode="lines",
                        name=trace_name,
                        legendgroup=str(index),
                        showlegend=position == 0,
                        line={"color": color(index)},
                    ),
                    row=position // 2 + 1,
                    col=position % 2 + 1,
                )
    figure.update_xaxes(title_text="seconds into the point")
    figure.update_layout(title=f"Server view over time: {run.label}", height=320 * rows)
    return figure


def _has_series(run: LoadedRun, key: str) -> bool:
    return any(series.name.endswith(key) for point in run.result.points for series in point.timelines)


def _format(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def points_table_html(run: LoadedRun) -> str:
    headers = [
        "load",
        "ok / sent",
        "req/s",
        "out tok/s",
        "TTFT p50 / p99",
        "TPOT p50 / p99",
        "ITL p50 / p99",
        "E2EL p50 / p99",
        "server TTFT mean",
        "SLO attainment",
        "valid",
    ]
    rows = []
    for point in run.result.points:

        def pair(metric: str, point: LoadPointResult = point) -> str:
            median = _format(_statistic(point, metric, "median"))
            return f"{median} / {_format(_statistic(point, metric, 'p99'))}"

        attainment = "-"
        if point.goodput is not None:
            goodput = point.goodput
            attainment = (
                f"{goodput.attainment:.1%} [{goodput.attainment_ci_low:.1%}, "
                f"{goodput.attainment_ci_high:.1%}]"
            )
        validity = "yes" if point.valid else f"no: {point.invalid_reason or ''}"
        cells = [
            point_name(point),
            f"{point.requests_succeeded} / {point.requests_sent}",
            _format(point.request_throughput_per_s, 2),
            _format(point.output_token_throughput_per_s),
            pair("ttft_ms"),
            pair("tpot_ms"),
            pair("itl_ms"),
            pair("e2el_ms"),
            _format(server_ttft_mean_ms_from_series(point.timelines)),
            attainment,
            validity,
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    head = "".join(f"<th>{html.escape(header)}</th>" for header in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def server_table_html(run: LoadedRun) -> str:
    """The engine's and GPUs' figures per point, only the columns something was observed for."""
    summaries = [server_summary_from_series(point.timelines) for point in run.result.points]
    columns = [figure for figure in SERVER_FIGURES if any(s[figure[0]] is not None for s in summaries)]
    if not columns:
        return ""
    head = "<th>load</th>" + "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in columns)
    rows = []
    for point, summary in zip(run.result.points, summaries, strict=True):
        cells = [point_name(point)]
        for key, _title, digits in columns:
            value = summary[key]
            if value is not None and key == "peak_gpu_memory_used_bytes":
                value = value / 2**30
            cells.append(_format(value, digits))
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def ttft_gap_html(run: LoadedRun) -> str:
    """Client TTFT against the engine's own, per point (only where the engine's histogram was read)."""
    rows = []
    for point in run.result.points:
        server_ms = server_ttft_mean_ms_from_series(point.timelines)
        client_ms = _statistic(point, "ttft_ms", "mean")
        if server_ms is None or client_ms is None:
            continue
        cells = [point_name(point), _format(client_ms), _format(server_ms), _format(client_ms - server_ms)]
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    if not rows:
        return "<p>The engine's TTFT histogram was not read during this run (no /metrics polling).</p>"
    head = (
        "<tr><th>load</th><th>client TTFT mean (ms)</th><th>engine TTFT mean (ms)</th><th>gap (ms)</th></tr>"
    )
    note = (
        "<p>The gap is what the engine's own clock does not see: HTTP, queueing in the API server, "
        "detokenization, the network and the client.</p>"
    )
    return f"{note}<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #1d1d1f; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f2f2f2; }
.invalid { background: #fde8e8; border: 1px solid #e0a0a0; padding: 0.6em; }
.meta td { text-align: left; }
"""


class FigureWriter:
    """Turns figures into HTML, inlining plotly.js in the first one only."""

    def __init__(self) -> None:
        self._inlined = False

    def __call__(self, figure: go.Figure) -> str:
        include: bool | str = not self._inlined
        self._inlined = True
        return str(figure.to_html(full_html=False, include_plotlyjs=include))


def page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body>{body}</body></html>"
    )


def meta_table_html(run: LoadedRun) -> str:
    result = run.result
    config = result.config
    rows: list[tuple[str, Any]] = [
        ("model", result.engine.served_model),
        ("endpoint", f"{result.engine.base_url} ({config.endpoint})"),
        ("engine", f"{result.engine.engine or 'unknown'} {result.engine.engine_version or ''}"),
        ("dataset", f"{config.dataset} ({config.input_tokens} in / {config.output_tokens} out)"),
        ("prompt tokens counted by", config.prompt_tokens_counted_by or "nothing (lengths as requested)"),
        ("seed", config.seed),
        ("load", f"{config.load_kind} {', '.join(f'{v:g}' for v in config.load_values)}"),
        ("repeats", config.repeats),
        (
            "client",
            f"{result.hardware.client_hostname} ({result.hardware.client_cpu_count} CPUs, "
            f"{result.hardware.client_platform})",
        ),
        ("GPUs", ", ".join(result.hardware.gpus) or f"{gpu_count_of(result)[0]} ({gpu_count_of(result)[1]})"),
        ("run", f"{result.run_id} at {result.created_at}, modelyard {result.hardware.modelyard_version}"),
    ]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="meta">{cells}</table>'


def render_report(run: LoadedRun) -> str:
    """The whole page for one run."""
    figure_html = FigureWriter()
    result = run.result
    parts = [
        f"<h1>Benchmark: {html.escape(run.label)} serving {html.escape(result.engine.served_model)}</h1>"
    ]
    parts.append(meta_table_html(run))
    if not result.valid:
        parts.append(
            f'<p class="invalid">This run is marked invalid: {html.escape(result.invalid_reason or "")}</p>'
        )
    parts.append("<h2>Load points</h2>" + points_table_html(run))
    check = check_input_lengths(run.prompts, run.requests_by_point)
    parts.append("<h2>Input lengths</h2>" + input_lengths_html(check, [point_name(p) for p in result.points]))
    if not run.requests_by_point:
        parts.append(
            "<p>No requests.jsonl beside the result: CDFs are drawn from the stored percentiles.</p>"
        )
    indices = list(range(len(result.points)))
    parts.append(figure_html(latency_cdf_figure([(run, indices)])))
    if len(result.points) > 1:
        parts.append(figure_html(load_figure([run])))
    parts.append(figure_html(per_user_figure([run])))
    parts.append("<h2>The server's view</h2>")
    parts.append(server_table_html(run))
    timelines = timeline_figure(run)
    parts.append(
        figure_html(timelines) if timelines is not None else "<p>No server timelines were recorded.</p>"
    )
    parts.append("<h3>Client vs engine TTFT</h3>" + ttft_gap_html(run))
    if not figure_html._inlined:  # every page carries plotly.js, even one without plots
        parts.append(figure_html(go.Figure()))
    return page(f"modelyard bench: {run.label}", "".join(parts))


def write_report(result_path: Path, output_path: Path, *, label: str | None = None) -> Path:
    """Read a result (and its requests) and write the HTML report; returns the path written."""
    run = load_run(result_path, label=label)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    output_path.write_text(render_report(run), encoding="utf-8")
    return output_path
