"""Writing a run to disk (JSON, per-request JSONL, CSV, the prompts) and its summary table.

    paths = write_outputs(outcome, Path("runs/qwen-vllm"))
    Console().print(summary_table(outcome.result))

Files in the output directory:

- ``result.json``: the versioned ``RunResult`` (configuration, engine, hardware, every point).
- ``requests.jsonl``: one line per request, warm-up included (``warmup: true``), with the point it
  belongs to (``point_index``, ``load_kind``, ``load_value``, ``repeat_index``).
- ``points.csv``: one row per load point with the headline figures.
- ``prompts.jsonl``: the prompts sent, to replay the same work against another engine
  (``--prompts-file``).
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from modelyard.bench.records import LoadPointResult, MetricSummary, RunResult
from modelyard.bench.runner import BenchmarkOutcome

logger = logging.getLogger(__name__)

CSV_METRICS = (
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "itl_per_token_ms",
    "e2el_ms",
    "time_to_first_content_ms",
    "send_lag_ms",
)
CSV_STATISTICS = ("mean", "median", "p90", "p95", "p99", "std")


@dataclass(frozen=True)
class OutputPaths:
    result_json: Path
    requests_jsonl: Path
    points_csv: Path
    prompts_jsonl: Path | None


def point_row(index: int, point: LoadPointResult) -> dict[str, object]:
    """The CSV row of one point: counts, throughputs, then each latency statistic."""
    row: dict[str, object] = {
        "point_index": index,
        "load_kind": point.point.kind,
        "load_value": point.point.value,
        "repeat_index": point.point.repeat_index,
        "valid": point.valid,
        "invalid_reason": point.invalid_reason or "",
        "requests_sent": point.requests_sent,
        "requests_succeeded": point.requests_succeeded,
        "requests_failed": point.requests_failed,
        "missing_usage_count": point.missing_usage_count,
        "measurement_duration_s": point.measurement_duration_s,
        "request_throughput_per_s": point.request_throughput_per_s,
        "output_token_throughput_per_s": point.output_token_throughput_per_s,
        "total_token_throughput_per_s": point.total_token_throughput_per_s,
        "slo_attainment": point.goodput.attainment if point.goodput else None,
        "goodput_requests_per_s": point.goodput.goodput_requests_per_s if point.goodput else None,
    }
    for metric in CSV_METRICS:
        summary = point.metrics.get(metric)
        for statistic in CSV_STATISTICS:
            row[f"{statistic}_{metric}"] = getattr(summary, statistic) if summary else None
    return row


def write_outputs(outcome: BenchmarkOutcome, directory: Path) -> OutputPaths:
    """Write every output file of a run into ``directory`` (created when missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = OutputPaths(
        result_json=directory / "result.json",
        requests_jsonl=directory / "requests.jsonl",
        points_csv=directory / "points.csv",
        prompts_jsonl=directory / "prompts.jsonl" if outcome.prompts else None,
    )
    paths.result_json.write_text(outcome.result.to_json())
    with paths.requests_jsonl.open("w") as stream:
        for index, (point, records) in enumerate(zip(outcome.result.points, outcome.records, strict=True)):
            prefix = json.dumps(
                {
                    "point_index": index,
                    "load_kind": point.point.kind,
                    "load_value": point.point.value,
                    "repeat_index": point.point.repeat_index,
                },
                separators=(",", ":"),
            )[:-1]
            for record in records:
                stream.write(prefix + "," + record.to_json()[1:] + "\n")
    rows = [point_row(index, point) for index, point in enumerate(outcome.result.points)]
    with paths.points_csv.open("w", newline="") as stream:
        if rows:
            writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if paths.prompts_jsonl is not None:
        from modelyard.bench.datasets import save_prompts

        save_prompts(outcome.prompts, paths.prompts_jsonl, description=f"run {outcome.result.run_id}")
    return paths


def _figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_table(result: RunResult) -> Table:
    """One row per load point: throughput, the median and p99 of each latency, validity."""
    engine = result.engine.engine or "unknown engine"
    version = f" {result.engine.engine_version}" if result.engine.engine_version else ""
    table = Table(title=f"{result.engine.served_model} on {engine}{version} ({result.engine.base_url})")
    for header in (
        "load",
        "ok/sent",
        "req/s",
        "out tok/s",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "ITL p50/p99 ms",
        "E2EL p50 ms",
        "SLO met",
        "valid",
    ):
        table.add_column(header, justify="right" if header not in ("load", "valid") else "left")
    for point in result.points:
        metrics = point.metrics

        def pair(name: str, metrics: dict[str, MetricSummary] = metrics) -> str:
            summary = metrics.get(name)
            if summary is None or summary.count == 0:
                return "-"
            return f"{_figure(summary.median)}/{_figure(summary.p99)}"

        e2el = metrics.get("e2el_ms")
        goodput = point.goodput
        slo = "-"
        if goodput is not None:
            interval = f"{goodput.attainment_ci_low:.0%}-{goodput.attainment_ci_high:.0%}"
            slo = f"{goodput.attainment:.0%} [{interval}]"
        output_rate = point.output_token_throughput_per_s
        output = (
            _figure(output_rate) if output_rate is not None else f"no usage ({point.missing_usage_count})"
        )
        table.add_row(
            point.point.label,
            f"{point.requests_succeeded}/{point.requests_sent}",
            _figure(point.request_throughput_per_s, 2),
            output,
            pair("ttft_ms"),
            pair("tpot_ms"),
            pair("itl_ms"),
            _figure(e2el.median if e2el else None),
            slo,
            "yes" if point.valid else f"NO: {point.invalid_reason}",
        )
    return table
