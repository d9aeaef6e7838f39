"""Automatic load search: bracket then bisect, for the SLO limit and for the saturation knee.

Most tests drive the search with a deterministic double of the runner (``measure`` computes a
point's figures from a formula); the last one runs the real runner against the reference server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.bench.records import (
    GoodputResult,
    LoadPoint,
    LoadPointResult,
    RunConfig,
    RunResult,
    SloTargets,
)
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.bench.search import (
    Measure,
    SearchSettings,
    runner_measure,
    search_saturation_knee,
    search_slo_load,
)
from modelyard.cli.main import app
from modelyard.errors import InvalidInput


def fake_point(
    load: float, throughput: float, attainment: float | None = 1.0, valid: bool = True
) -> LoadPointResult:
    goodput = None
    if attainment is not None:
        goodput = GoodputResult(
            slo=SloTargets(ttft_ms=100.0),
            requests_sent=100,
            requests_met=round(attainment * 100),
            attainment=attainment,
            attainment_ci_low=attainment,
            attainment_ci_high=attainment,
            goodput_requests_per_s=throughput * attainment,
        )
    return LoadPointResult(
        point=LoadPoint("rate", load),
        started_at="2026-11-30T00:00:00+00:00",
        measurement_duration_s=10.0,
        requests_sent=100,
        requests_succeeded=100,
        requests_failed=0,
        warmup_requests=0,
        missing_usage_count=0,
        request_throughput_per_s=throughput / 100.0,
        output_token_throughput_per_s=throughput,
        total_token_throughput_per_s=None,
        input_token_throughput_per_s=None,
        goodput=goodput,
        valid=valid,
        invalid_reason=None if valid else "the client fell behind its schedule",
    )


def fake_measure(point_at: Callable[[float], LoadPointResult], loads: list[float]) -> Measure:
    """A double of the runner: records the loads asked for and answers from a formula."""

    async def measure(load: float) -> LoadPointResult:
        loads.append(load)
        return point_at(load)

    return measure


def slo_limit_at(limit: float) -> Callable[[float], LoadPointResult]:
    return lambda load: fake_point(load, 100.0 * load, 1.0 if load <= limit else 0.9)


async def test_slo_search_on_rates_brackets_then_bisects_to_within_tolerance() -> None:
    loads: list[float] = []
    settings = SearchSettings(load_kind="rate", start_load=1.0, tolerance_ratio=0.05)
    outcome = await search_slo_load(fake_measure(slo_limit_at(13.7), loads), settings)
    assert loads[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert outcome.found_load is not None
    assert 13.7 * 0.95 <= outcome.found_load <= 13.7
    assert len(loads) <= settings.max_steps
    assert all(step.passed == (step.load <= 13.7) for step in outcome.steps)


async def test_slo_search_on_concurrency_finds_the_exact_integer_limit() -> None:
    outcome = await search_slo_load(fake_measure(slo_limit_at(37), []), SearchSettings(start_load=1))
    assert outcome.found_load == 37
    assert "missed them at 38" in outcome.reason


async def test_slo_search_goes_down_when_the_start_load_already_misses() -> None:
    loads: list[float] = []
    outcome = await search_slo_load(fake_measure(slo_limit_at(3), loads), SearchSettings(start_load=8))
    assert loads[:3] == [8.0, 4.0, 2.0]
    assert outcome.found_load == 3


async def test_slo_search_reports_when_no_load_meets_the_slo() -> None:
    outcome = await search_slo_load(fake_measure(slo_limit_at(0.0), []), SearchSettings(start_load=4))
    assert outcome.found_load is None
    assert "missed the SLOs even at load 1" in outcome.reason


async def test_slo_search_stops_at_max_load_and_says_so() -> None:
    settings = SearchSettings(start_load=1, max_load=16)
    outcome = await search_slo_load(fake_measure(slo_limit_at(1000), []), settings)
    assert outcome.found_load == 16
    assert "--max-load" in outcome.reason


async def test_an_invalid_point_counts_as_missing_the_slo() -> None:
    def point_at(load: float) -> LoadPointResult:
        return fake_point(load, 100.0 * load, 1.0, valid=load <= 5)

    outcome = await search_slo_load(fake_measure(point_at, []), SearchSettings(start_load=1))
    assert outcome.found_load == 5


async def test_slo_search_without_slo_targets_says_which_flags_to_give() -> None:
    measure = fake_measure(lambda load: fake_point(load, 10.0, attainment=None), [])
    with pytest.raises(InvalidInput, match="--slo-ttft-ms"):
        await search_slo_load(measure, SearchSettings())


async def test_knee_of_a_closed_loop_is_the_lowest_concurrency_near_peak_throughput() -> None:
    # Throughput 1000 * c / (c + 8): doubling stops at c=256 (3 % more than c=128); 95 % of that
    # peak (969.7) is first reached at c=94.
    def point_at(load: float) -> LoadPointResult:
        return fake_point(load, 1000.0 * load / (load + 8.0))

    outcome = await search_saturation_knee(fake_measure(point_at, []), SearchSettings(start_load=1))
    assert outcome.found_load == 94
    assert outcome.reason.startswith("throughput reaches 95% of its peak")


async def test_knee_of_an_open_loop_is_the_server_capacity() -> None:
    # 100 tokens per request, capacity 20 requests/s: past 20 req/s throughput stays flat.
    def point_at(load: float) -> LoadPointResult:
        return fake_point(load, 100.0 * min(load, 20.0))

    settings = SearchSettings(load_kind="rate", start_load=1.0)
    outcome = await search_saturation_knee(fake_measure(point_at, []), settings)
    assert outcome.found_load is not None
    assert 19.0 <= outcome.found_load <= 20.0 / 0.95


async def test_knee_search_says_when_throughput_was_still_growing_at_max_load() -> None:
    outcome = await search_saturation_knee(
        fake_measure(lambda load: fake_point(load, 100.0 * load), []),
        SearchSettings(start_load=1, max_load=8),
    )
    assert outcome.found_load == 8
    assert "still growing" in outcome.reason


def test_settings_that_cannot_search_are_refused() -> None:
    with pytest.raises(InvalidInput, match="growth_factor"):
        SearchSettings(growth_factor=1.0)
    with pytest.raises(InvalidInput, match="start_load"):
        SearchSettings(start_load=10, max_load=5)


async def test_knee_search_with_the_real_runner_finds_the_reference_servers_slot_count() -> None:
    """The reference server runs four requests at a time: throughput stops growing at concurrency 4.

    On a loaded machine the client's gap between one request's end and the next send leaves a slot
    idle for a moment, which a little more concurrency hides: the knee may read up to 8, never 16.
    """
    config = ReferenceConfig(flavor="vllm", ttft_ms=40, itl_ms=5, output_tokens=8, max_concurrency=4)
    with ReferenceServer(config) as server:
        run_config = RunConfig(
            base_url=server.base_url,
            model="reference-model",
            load_kind="concurrency",
            num_requests=12,
            output_tokens=8,
            dataset="builtin",
        )
        measure = runner_measure(run_config)
        outcome = await search_saturation_knee(measure, SearchSettings(start_load=1, max_load=16))
    assert outcome.found_load is not None
    assert 4 <= outcome.found_load <= 8, outcome.steps
    assert all(result.requests_succeeded == 12 for result in outcome.results.values())


def test_search_command_prints_the_steps_and_writes_the_search_and_a_report(tmp_path: Path) -> None:
    config = ReferenceConfig(flavor="vllm", ttft_ms=20, itl_ms=3, output_tokens=8, max_concurrency=2)
    with ReferenceServer(config) as server:
        arguments = ["bench", "search", "--base-url", server.base_url, "--model", "reference-model"]
        arguments += ["--find", "slo", "--slo-ttft-ms", "45", "--attainment", "0.75", "--max-load", "8"]
        arguments += [
            "--num-requests",
            "12",
            "--output-tokens",
            "8",
            "--dataset",
            "builtin",
            "--out",
            str(tmp_path),
        ]
        outcome = CliRunner().invoke(app, arguments)
    assert outcome.exit_code == 0, outcome.output
    assert "search steps" in outcome.output
    found = json.loads((tmp_path / "search.json").read_text())
    # Two slots: from concurrency 3 on, a third or more of the requests wait a whole request (~41 ms)
    # in the queue before their 20 ms TTFT, missing 45 ms; at 2 none wait.
    assert found["found_load"] == 2
    assert (tmp_path / "report.html").is_file()
    assert RunResult.from_json((tmp_path / "result.json").read_text()).points


async def test_each_measurement_gets_its_own_prompts_so_a_prefix_cache_cannot_serve_later_loads() -> None:
    config = ReferenceConfig(flavor="vllm", ttft_ms=1, itl_ms=1, output_tokens=4, max_concurrency=8)
    with ReferenceServer(config) as server:
        run_config = RunConfig(
            base_url=server.base_url,
            model="reference-model",
            num_requests=4,
            input_tokens=20,
            output_tokens=4,
        )
        fresh = runner_measure(run_config)
        await fresh(1.0)
        await fresh(2.0)
        reused = runner_measure(run_config, fresh_prompts=False)
        await reused(1.0)
        await reused(2.0)
    assert set(fresh.prompt_ids_by_load[1.0]).isdisjoint(fresh.prompt_ids_by_load[2.0])
    assert reused.prompt_ids_by_load[1.0] == reused.prompt_ids_by_load[2.0]
