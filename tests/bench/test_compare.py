"""Comparing runs: two configurations of one reference server (2 slots against 8), side by side.

With 8 concurrent requests, 8 slots serve everyone at once while 2 slots queue six of them: the
comparison must show the 8-slot run's higher throughput and lower TTFT as better, and say when
the two runs did not do the same work.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from modelyard.bench.compare import (
    averaged_figures,
    comparison_table,
    distinct_labels,
    render_comparison,
    workload_differences,
)
from modelyard.bench.outputs import write_outputs
from modelyard.bench.records import LoadKind, RunConfig
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.report_html import LoadedRun, load_run
from modelyard.bench.runner import run_benchmark_async
from modelyard.cli.main import app
from modelyard.errors import InvalidInput


def run_against_reference(directory: Path, *, slots: int) -> Path:
    config = ReferenceConfig(flavor="sglang", ttft_ms=20, itl_ms=3, output_tokens=8, max_concurrency=slots)
    with ReferenceServer(config) as server:
        run_config = RunConfig(
            base_url=server.base_url,
            model="reference-model",
            load_values=[1, 8],
            num_requests=16,
            output_tokens=8,
            dataset="builtin",
        )
        outcome = asyncio.run(run_benchmark_async(run_config))
    write_outputs(outcome, directory)
    return directory


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    return run_against_reference(root / "two-slots", slots=2), run_against_reference(
        root / "eight-slots", slots=8
    )


def test_ratios_show_the_wider_server_better_where_load_exceeds_the_narrow_one(
    two_runs: tuple[Path, Path],
) -> None:
    narrow, wide = (load_run(path) for path in two_runs)
    narrow_figures, wide_figures = averaged_figures(narrow), averaged_figures(wide)
    at_eight: tuple[LoadKind, float] = ("concurrency", 8.0)
    narrow_throughput = narrow_figures[at_eight]["output_token_throughput_per_s"]
    wide_throughput = wide_figures[at_eight]["output_token_throughput_per_s"]
    assert narrow_throughput is not None and wide_throughput is not None
    assert wide_throughput / narrow_throughput > 2.0
    console = Console(record=True, width=200, color_system="truecolor")
    console.print(comparison_table([narrow, wide]))
    text = console.export_text(clear=False)
    assert "8 concurrent" in text and "1 concurrent" in text
    eight_rows = text.split("8 concurrent", 1)[1]
    ratio = float(re.search(r"\(([\d.]+)x\)", eight_rows).group(1))  # type: ignore[union-attr]
    assert ratio > 2.0  # the first figure of the section is output tok/s
    styled = console.export_html(inline_styles=True)
    assert "color: #008000" in styled  # better figures are green


def test_same_engine_labels_are_told_apart_by_their_folders(two_runs: tuple[Path, Path]) -> None:
    runs = [load_run(path) for path in two_runs]
    assert runs[0].label == runs[1].label == "sglang 0.5.17"
    assert distinct_labels(runs) == ["sglang 0.5.17 (two-slots)", "sglang 0.5.17 (eight-slots)"]


def test_different_workloads_are_listed(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = json.loads((two_runs[1] / "result.json").read_text())
    data["config"]["output_tokens"] = 256
    (tmp_path / "result.json").write_text(json.dumps(data))
    runs = [load_run(two_runs[0]), load_run(tmp_path / "result.json", label="longer")]
    differences = workload_differences(runs)
    assert differences == ["output_tokens: sglang 0.5.17=8, longer=256"]
    assert "The workloads differ" in render_comparison(runs)
    assert workload_differences([load_run(path) for path in two_runs]) == []


def test_runs_that_sent_different_prompts_are_told_apart_by_digest(
    two_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "result.json").write_text((two_runs[1] / "result.json").read_text())
    lines = (two_runs[1] / "prompts.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"content": "', '"content": "Changed: ', 1)
    (other / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    runs = [load_run(two_runs[0], label="a"), load_run(other, label="b")]
    differences = workload_differences(runs)
    assert len(differences) == 1 and differences[0].startswith("prompts (digest of the texts sent): a=")


def test_comparison_page_is_self_contained_and_shows_both_runs(two_runs: tuple[Path, Path]) -> None:
    runs = [load_run(path, label=label) for path, label in zip(two_runs, ["2 slots", "8 slots"], strict=True)]
    page = render_comparison(runs)
    assert re.search(r"<script[^>]*\ssrc=", page) is None
    assert len(re.findall(r"plotly\.js v\d", page)) == 1
    assert "<h1>Comparison: 2 slots vs 8 slots</h1>" in page
    assert "Latency distributions at 8 concurrent" in page


def test_compare_needs_two_results(two_runs: tuple[Path, Path]) -> None:
    with pytest.raises(InvalidInput, match="at least two"):
        comparison_table([load_run(two_runs[0])])


def test_compare_command_prints_the_table_and_writes_html(
    two_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    html_path = tmp_path / "compare.html"
    arguments = ["bench", "compare", *map(str, two_runs), "--label", "2 slots", "--label", "8 slots"]
    outcome = CliRunner().invoke(app, [*arguments, "--html", str(html_path)])
    assert outcome.exit_code == 0, outcome.output
    assert "baseline: 2 slots" in outcome.output
    assert "8 slots" in html_path.read_text()


def test_compare_command_refuses_a_label_count_that_does_not_match(two_runs: tuple[Path, Path]) -> None:
    outcome = CliRunner().invoke(app, ["bench", "compare", *map(str, two_runs), "--label", "only one"])
    assert outcome.exit_code == 1  # InvalidInput, as one error line
    assert "one per result" in outcome.stderr


def test_repeats_of_a_load_are_averaged(two_runs: tuple[Path, Path]) -> None:
    run = load_run(two_runs[0])
    first = run.result.points[0]
    copy = json.loads(run.result.to_json())["points"][0]
    copy["point"]["repeat_index"] = 1
    copy["request_throughput_per_s"] = first.request_throughput_per_s + 2.0
    data = json.loads(run.result.to_json())
    data["points"].append(copy)
    from modelyard.bench.records import RunResult

    doubled = LoadedRun(label="x", result=RunResult.from_json(json.dumps(data)))
    averaged = averaged_figures(doubled)[("concurrency", 1.0)]["request_throughput_per_s"]
    assert averaged == pytest.approx(first.request_throughput_per_s + 1.0)
