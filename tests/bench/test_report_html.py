"""The HTML report of a run: self-contained, every point shown, CDFs from the requests, the server view,
input lengths checked against the engine's usage.

The run is a real one: the benchmark runner against the reference server playing vLLM, with the
/metrics poller attached, written to disk by ``outputs.write_outputs``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.bench.outputs import write_outputs
from modelyard.bench.records import RunConfig, SloTargets, TimelineSeries
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.report_html import (
    gpu_count_of,
    latency_cdf_figure,
    load_run,
    per_user_figure,
    render_report,
    write_report,
)
from modelyard.bench.runner import run_benchmark_async
from modelyard.bench.server_metrics import metrics_url_for
from modelyard.bench.server_poller import ServerMetricsObserver
from modelyard.cli.main import app
from modelyard.errors import NotFound

REQUESTS_PER_POINT = 12


def run_against_reference(directory: Path, *, slots: int, output_tokens: int = 8) -> Path:
    """A two-point sweep (concurrency 2 and 8) against a reference server with ``slots`` slots."""
    config = ReferenceConfig(
        flavor="vllm", ttft_ms=20, itl_ms=3, output_tokens=output_tokens, max_concurrency=slots
    )
    with ReferenceServer(config) as server:
        run_config = RunConfig(
            base_url=server.base_url,
            model="reference-model",
            load_values=[2, 8],
            num_requests=REQUESTS_PER_POINT,
            output_tokens=output_tokens,
            dataset="random",
            input_tokens=24,
            slo=SloTargets(ttft_ms=45.0),
        )
        url = metrics_url_for(server.base_url)
        outcome = asyncio.run(
            run_benchmark_async(
                run_config, observer_factories=[lambda: ServerMetricsObserver(url, interval_s=0.02)]
            )
        )
    write_outputs(outcome, directory)
    return directory


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_against_reference(tmp_path_factory.mktemp("run"), slots=4)


def test_report_is_one_self_contained_page_with_plotly_inlined_once(
    run_directory: Path, tmp_path: Path
) -> None:
    page = write_report(run_directory / "result.json", tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert re.search(r"<script[^>]*\ssrc=", page) is None
    assert re.search(r"<link[^>]*\shref=", page) is None
    assert len(re.findall(r"plotly\.js v\d", page)) == 1


def test_report_shows_every_load_point_and_its_counts(run_directory: Path) -> None:
    page = render_report(load_run(run_directory))
    points_table = page.split("<h2>Load points</h2>", 1)[1].split("<h2>", 1)[0]
    for label in ("2 concurrent", "8 concurrent"):
        assert f"<td>{label}</td>" in points_table
    assert points_table.count(f"<td>{REQUESTS_PER_POINT} / {REQUESTS_PER_POINT}</td>") == 2
    assert "Latency distributions (CDF)" in page
    assert "Throughput and latency against load" in page
    assert "against output tokens" in page and "per GPU" in page


def test_cdfs_use_every_successful_request_when_requests_jsonl_is_there(run_directory: Path) -> None:
    run = load_run(run_directory)
    assert sorted(run.requests_by_point) == [0, 1]
    figure = latency_cdf_figure([(run, [0])])
    ttft_trace = figure.data[0]
    assert len(ttft_trace.x) == REQUESTS_PER_POINT
    assert list(ttft_trace.x) == sorted(ttft_trace.x)
    assert ttft_trace.y[-1] == 1.0


def test_without_requests_jsonl_the_cdfs_come_from_stored_percentiles(
    run_directory: Path, tmp_path: Path
) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "result.json").write_text((run_directory / "result.json").read_text())
    run = load_run(alone)
    assert run.requests_by_point == {}
    figure = latency_cdf_figure([(run, [0])])
    assert figure.data[0].name.endswith("(percentiles)")
    assert "drawn from the stored percentiles" in render_report(run)


def test_report_shows_the_server_timelines_and_the_ttft_gap(run_directory: Path) -> None:
    page = render_report(load_run(run_directory))
    assert "Server view over time" in page
    assert "running requests" in page and "waiting requests" in page
    assert "<th>peak running</th>" in page and "<th>engine TTFT mean (ms)</th>" in page
    gap_table = page.split("Client vs engine TTFT", 1)[1]
    assert "engine TTFT mean (ms)" in gap_table
    assert "<td>8 concurrent</td>" in gap_table


def test_an_invalid_run_says_so_at_the_top(run_directory: Path, tmp_path: Path) -> None:
    data = json.loads((run_directory / "result.json").read_text())
    data["valid"] = False
    data["invalid_reason"] = "8 concurrent: the client fell behind its schedule"
    (tmp_path / "result.json").write_text(json.dumps(data))
    page = render_report(load_run(tmp_path / "result.json"))
    assert "This run is marked invalid: 8 concurrent: the client fell behind its schedule" in page


def test_a_missing_result_is_not_found_with_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"result\.json"):
        load_run(tmp_path / "nothing")


def test_report_command_writes_the_page_beside_the_result(run_directory: Path) -> None:
    outcome = CliRunner().invoke(app, ["bench", "report", str(run_directory), "--label", "four slots"])
    assert outcome.exit_code == 0, outcome.output
    written = run_directory / "report.html"
    assert outcome.output.strip() == str(written)
    assert "<h1>Benchmark: four slots serving reference-model</h1>" in written.read_text()


def test_per_gpu_throughput_divides_by_the_gpus_nvml_sampled_when_none_were_recorded(
    run_directory: Path,
) -> None:
    run = load_run(run_directory)
    assert gpu_count_of(run.result) == (1, "not recorded: 1 assumed")
    for index in (0, 1):
        series = TimelineSeries(name=f"gpu{index}_power_watts", unit="W", times_s=[0.0], values=[300.0])
        series.source = f"nvml:gpu{index}"
        run.result.points[0].timelines.append(series)
    assert gpu_count_of(run.result) == (2, "sampled by NVML")
    trace = per_user_figure([run]).data[0]
    by_load = sorted(run.result.points, key=lambda point: point.point.value)
    throughput = by_load[0].output_token_throughput_per_s
    assert throughput is not None
    assert trace.y[0] == pytest.approx(throughput / 2)
    assert "2 GPU, sampled by NVML" in trace.name


def test_report_checks_each_input_length_against_the_engines_usage(run_directory: Path) -> None:
    run = load_run(run_directory)
    # Two load points, each with prompts of its own.
    prompt_count = 2 * REQUESTS_PER_POINT
    assert len(run.prompts) == prompt_count
    section = render_report(run).split("<h2>Input lengths</h2>", 1)[1].split("<h2>", 1)[0]
    assert f"{prompt_count} of {prompt_count} prompts were built at exactly their requested length" in section
    assert "24 to 24 tokens" in section
    assert section.count(f"<td>{REQUESTS_PER_POINT} / {REQUESTS_PER_POINT}</td>") == 2
