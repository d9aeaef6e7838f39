"""Engines or configurations side by side: ``modelyard bench compare A.json B.json ...``.

Points are matched by load (kind and value; repeats averaged). The first run is the baseline;
every other run shows its figure and its ratio to the baseline, green where it is better. Runs
whose workloads differ (dataset, lengths, seed, endpoint) are compared anyway, with the
differences listed first: a comparison of unlike work is a warning, not a result.

Usage::

    runs = [load_run(Path("runs/vllm")), load_run(Path("runs/sglang"))]
    Console().print(comparison_table(runs))
    Path("compare.html").write_text(render_comparison(runs))
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from modelyard.bench.input_lengths import prompts_digest
from modelyard.bench.records import LoadKind, LoadPointResult
from modelyard.bench.report_html import (
    FigureWriter,
    LoadedRun,
    latency_cdf_figure,
    load_figure,
    page,
    per_user_figure,
    timeline_figure,
)
from modelyard.bench.server_metrics import server_summary_from_series
from modelyard.errors import InvalidInput


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    higher_is_better: bool | None
    """None: no verdict (more KV cache or power in use is neither good nor bad by itself)."""


FIGURES: tuple[Figure, ...] = (
    Figure("output_token_throughput_per_s", "output tok/s", True),
    Figure("request_throughput_per_s", "requests/s", True),
    Figure("ttft_ms.median", "TTFT p50 (ms)", False),
    Figure("ttft_ms.p99", "TTFT p99 (ms)", False),
    Figure("tpot_ms.median", "TPOT p50 (ms)", False),
    Figure("tpot_ms.p99", "TPOT p99 (ms)", False),
    Figure("itl_ms.median", "ITL p50 (ms)", False),
    Figure("e2el_ms.median", "E2EL p50 (ms)", False),
    Figure("e2el_ms.p99", "E2EL p99 (ms)", False),
    Figure("output_tokens_per_s_per_user.median", "tok/s per user p50", True),
    Figure("slo_attainment", "SLO attainment", True),
    Figure("server.engine_ttft_mean_ms", "engine TTFT mean (ms)", False),
    Figure("server.preemptions", "preemptions", False),
    Figure("server.prefix_cache_hit_ratio", "prefix cache hits", True),
    Figure("server.peak_kv_cache_usage", "peak KV cache", None),
    Figure("server.mean_gpu_utilization_percent", "GPU util. mean (%)", None),
    Figure("server.mean_gpu_power_watts", "GPU power mean (W)", None),
)
# Differences a ratio stays silent about; in RunConfig field names.
WORKLOAD_FIELDS = (
    "dataset",
    "dataset_path",
    "prompts_file",
    "input_tokens",
    "output_tokens",
    "seed",
    "endpoint",
)


def figure_value(point: LoadPointResult, key: str) -> float | None:
    if key == "slo_attainment":
        return None if point.goodput is None else point.goodput.attainment
    if key.startswith("server."):
        return server_summary_from_series(point.timelines)[key.removeprefix("server.")]
    if "." in key:
        metric, statistic = key.split(".", 1)
        summary = point.metrics.get(metric)
        return None if summary is None else getattr(summary, statistic)
    value = getattr(point, key)
    return None if value is None else float(value)


def averaged_figures(run: LoadedRun) -> dict[tuple[LoadKind, float], dict[str, float | None]]:
    """For each load, each figure averaged over the point's repeats (``None`` when none had it)."""
    grouped: dict[tuple[LoadKind, float], list[LoadPointResult]] = {}
    for point in run.result.points:
        grouped.setdefault((point.point.kind, point.point.value), []).append(point)
    averaged: dict[tuple[LoadKind, float], dict[str, float | None]] = {}
    for load, points in grouped.items():
        figures: dict[str, float | None] = {}
        for figure in FIGURES:
            values = [value for value in (figure_value(p, figure.key) for p in points) if value is not None]
            figures[figure.key] = sum(values) / len(values) if values else None
        averaged[load] = figures
    return averaged


def distinct_labels(runs: Sequence[LoadedRun]) -> list[str]:
    """Run labels, made unique with the result's folder name where two would read the same."""
    original = [run.label for run in runs]
    labels = list(original)
    for index, run in enumerate(runs):
        if original.count(run.label) > 1 and run.source is not None:
            labels[index] = f"{run.label} ({run.source.parent.name})"
    return [label if labels.count(label) == 1 else f"{label} #{i + 1}" for i, label in enumerate(labels)]


def workload_differences(runs: Sequence[LoadedRun]) -> list[str]:
    """What differs between the runs' workloads, one line per field."""
    lines = []
    for name in WORKLOAD_FIELDS:
        values = [getattr(run.result.config, name) for run in runs]
        if len({repr(value) for value in values}) > 1:
            lines.append(
                f"{name}: "
                + ", ".join(f"{run.label}={value!r}" for run, value in zip(runs, values, strict=True))
            )
    if all(run.prompts for run in runs):
        digests = [prompts_digest(run.prompts) for run in runs]
        if len(set(digests)) > 1:
            named = ", ".join(f"{run.label}={digest}" for run, digest in zip(runs, digests, strict=True))
            lines.append(f"prompts (digest of the texts sent): {named}")
    # The served model name is not part of the workload: comparing two deployments (vLLM and
    # SGLang, or two flag sets) of the same weights under different names is the common case.
    # The header table shows each run's model.
    return lines


def _loads(runs: Sequence[LoadedRun]) -> list[tuple[LoadKind, float]]:
    loads = {(point.point.kind, point.point.value) for run in runs for point in run.result.points}
    return sorted(loads, key=lambda load: (load[0], load[1]))


def _load_label(load: tuple[LoadKind, float]) -> str:
    kind, value = load
    return f"{value:g} concurrent" if kind == "concurrency" else f"{value:g} req/s"


def _cell(value: float | None, baseline: float | None, figure: Figure) -> tuple[str, str | None]:
    """The text of a cell and whether it is better/worse than the baseline (``None``: no verdict)."""
    if value is None:
        return "-", None
    text = f"{value:.1%}" if figure.key == "slo_attainment" else f"{value:,.1f}"
    if baseline is None or baseline == 0:
        return text, None
    ratio = value / baseline
    text += f" ({ratio:.2f}x)"
    if abs(ratio - 1.0) < 0.02 or figure.higher_is_better is None:
        return text, None
    better = ratio > 1.0 if figure.higher_is_better else ratio < 1.0
    return text, "better" if better else "worse"


def _check(runs: Sequence[LoadedRun]) -> None:
    if len(runs) < 2:
        raise InvalidInput(f"compare needs at least two results, got {len(runs)}")


def comparison_table(runs: Sequence[LoadedRun]) -> Table:
    """A rich table: per load, one row per figure, one column per run (ratios to the first)."""
    _check(runs)
    labels = distinct_labels(runs)
    figures = [averaged_figures(run) for run in runs]
    table = Table(title=f"modelyard bench compare (baseline: {labels[0]})")
    table.add_column("load")
    table.add_column("figure")
    for label in labels:
        table.add_column(label, justify="right")
    for load in _loads(runs):
        for position, figure in enumerate(FIGURES):
            values = [by_load.get(load, {}).get(figure.key) for by_load in figures]
            if all(value is None for value in values):
                continue
            row: list[Text | str] = [_load_label(load) if position == 0 else "", figure.title]
            for index, value in enumerate(values):
                text, verdict = _cell(value, values[0] if index else None, figure)
                style = {"better": "green", "worse": "red"}.get(verdict or "", "")
                row.append(Text(text, style=style))
            table.add_row(*row, end_section=position == len(FIGURES) - 1)
    return table


def comparison_table_html(runs: Sequence[LoadedRun]) -> str:
    labels = distinct_labels(runs)
    figures = [averaged_figures(run) for run in runs]
    head = (
        "<tr><th>load</th><th>figure</th>" + "".join(f"<th>{html.escape(x)}</th>" for x in labels) + "</tr>"
    )
    rows = []
    colors = {"better": "#1a7f37", "worse": "#c62828"}
    for load in _loads(runs):
        for figure in FIGURES:
            values = [by_load.get(load, {}).get(figure.key) for by_load in figures]
            if all(value is None for value in values):
                continue
            cells = [f"<td>{html.escape(_load_label(load))}</td><td>{html.escape(figure.title)}</td>"]
            for index, value in enumerate(values):
                text, verdict = _cell(value, values[0] if index else None, figure)
                color = colors.get(verdict or "")
                style = f' style="color:{color}"' if color else ""
                cells.append(f"<td{style}>{html.escape(text)}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def render_comparison(runs: Sequence[LoadedRun]) -> str:
    """The comparison page: identities, workload differences, the table, overlaid plots, timelines."""
    _check(runs)
    labels = distinct_labels(runs)
    for run, label in zip(runs, labels, strict=True):
        run.label = label
    figure_html = FigureWriter()
    parts = [f"<h1>Comparison: {html.escape(' vs '.join(labels))}</h1>"]
    identity_rows = []
    for run in runs:
        result = run.result
        engine = f"{result.engine.engine or 'unknown'} {result.engine.engine_version or ''}"
        validity = "valid" if result.valid else f"INVALID: {result.invalid_reason or ''}"
        cells = [
            run.label,
            engine,
            result.engine.served_model,
            result.engine.base_url,
            result.created_at,
            validity,
        ]
        identity_rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "<tr><th>run</th><th>engine</th><th>model</th><th>URL</th><th>when</th><th>validity</th></tr>"
    parts.append(f'<table class="meta"><thead>{head}</thead><tbody>{"".join(identity_rows)}</tbody></table>')
    differences = workload_differences(runs)
    if differences:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in differences)
        parts.append(
            f'<div class="invalid">The workloads differ; ratios compare unlike work:<ul>{items}</ul></div>'
        )
    parts.append("<h2>Side by side (ratio to the first run)</h2>" + comparison_table_html(runs))
    if any(len(run.result.points) > 1 for run in runs):
        parts.append(figure_html(load_figure(runs)))
    parts.append(figure_html(per_user_figure(runs)))
    common = set.intersection(*({(p.point.kind, p.point.value) for p in run.result.points} for run in runs))
    if common:
        highest = max(common, key=lambda load: load[1])
        chosen = [
            (
                run,
                [i for i, p in enumerate(run.result.points) if (p.point.kind, p.point.value) == highest][:1],
            )
            for run in runs
        ]
        parts.append(f"<h2>Latency distributions at {html.escape(_load_label(highest))}</h2>")
        parts.append(figure_html(latency_cdf_figure(chosen)))
    for run in runs:
        timelines = timeline_figure(run)
        if timelines is not None:
            parts.append(figure_html(timelines))
    if not figure_html._inlined:
        parts.append(figure_html(per_user_figure(runs)))
    return page("modelyard bench compare", "".join(parts))
