"""``modelyard tune`` end to end: candidates pruned by the doctor and the estimator, the survivors
deployed one at a time on a real server and measured with the real bench through its gateway,
by successive halving, against the vLLM engine double whose curve says which one is best
(``curve_engine.py``: at 8 streams, ``--max-num-seqs 8 --max-num-batched-tokens 8192``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.tune.contract import SilentProgress
from modelyard.tune.measurement import Measurement
from modelyard.tune.server_deployer import ServerDeployer
from modelyard.tune.session import TuneRequest, TuneResult, run_tune
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import Candidate, EngineChoice, SearchSpace
from modelyard.tune.tuner import TuneSettings
from modelyard.tune.workloads import Workload

from .conftest import BACKEND, GPUS_TEXT, MODEL_NAME, TunePlatform

ENGINE = EngineChoice(BACKEND, "vllm", "1.0", engine_version="0.25.0")
# 2 layouts x (defaults + 2 x 2 knobs) = 10 candidates; tensor parallel 1 cannot hold Qwen3-8B's
# 15 GiB of weights in 90 % of one 16 GiB GPU, so the estimator drops those 5 before anything starts.
SPACE = SearchSpace(
    engines=(ENGINE,),
    tensor_parallel=(1, 2),
    memory_fraction=(0.9,),
    max_sequences=(2, 8),
    batched_tokens=(1024, 8192),
)
WORKLOAD = Workload(
    "eight-streams",
    "8 streams of short chats",
    16,
    8,
    (8.0,),
    input_spread=0.0,
    output_spread=0.0,
    source="test",
)
# rung 0: the 5 survivors with 16 requests; rung 1: the best 3 with 32: 8 bench runs in all.
SETTINGS = TuneSettings(rungs=2, requests_per_point=16, growth=2, keep_ratio=2)
BEST_LABEL = "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192"


class CountingProgress(SilentProgress):
    """Counts the bench runs taken; ``interrupt_after`` of them, it raises KeyboardInterrupt as a
    Ctrl-C at that moment would."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.finished: list[tuple[str, int]] = []
        self.interrupt_after = interrupt_after

    def measurement_finished(self, candidate: Candidate, measurement: Measurement) -> None:
        self.finished.append((candidate.label, measurement.rung))
        if self.interrupt_after is not None and len(self.finished) >= self.interrupt_after:
            raise KeyboardInterrupt


class SteppingClock:
    """A clock that moves ``step_s`` at each reading: every start and every run lasts ``step_s``."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.now_s = 0.0

    def __call__(self) -> float:
        self.now_s += self.step_s
        return self.now_s


def tune(
    platform: TunePlatform,
    data_dir: Path,
    settings: TuneSettings,
    progress: CountingProgress,
    clock: SteppingClock | None = None,
) -> TuneResult:
    request = TuneRequest(
        model=MODEL_NAME,
        model_facts=platform.model_facts,
        gpus_text=GPUS_TEXT,
        gpus=platform.gpus,
        workload=WORKLOAD,
        slos=parse_slos("ttft_p95<=150ms"),
        space=SPACE,
        settings=settings,
    )
    api = platform.api()
    try:
        with ServerDeployer(api, "", MODEL_NAME, start_timeout_s=120) as deployer:

            def deployer_for(tune_id: str) -> ServerDeployer:
                deployer.tune_id = tune_id
                return deployer

            if clock is None:
                return run_tune(request, data_dir, deployer_for=deployer_for, progress=progress)
            return run_tune(request, data_dir, deployer_for=deployer_for, progress=progress, clock=clock)
    finally:
        api.close()


def test_tune_picks_the_candidate_the_curve_says_is_best(tune_platform: TunePlatform, tmp_path: Path) -> None:
    progress = CountingProgress()
    result = tune(tune_platform, tmp_path, SETTINGS, progress)

    assert result.report["winners"][0]["label"] == BEST_LABEL
    assert result.outcome.ranking[0].label == BEST_LABEL
    # Pruned before anything started: every tensor-parallel-1 candidate, by the estimator.
    dropped = {row["label"]: row["dropped"] for row in result.report["candidates"] if row["dropped"]}
    assert sorted(dropped) == sorted(c.label for c in result.candidates if c.tensor_parallel == 1)
    assert all(drop["stage"] == "estimate" for drop in dropped.values())
    assert len(progress.finished) == 8
    assert {label for label, rung in progress.finished if rung == 1} == {
        label for label in (c.label for c in result.outcome.ranking[:3])
    }
    # Each run is a bench record as `modelyard bench run --out` writes it.
    for measurements in result.outcome.measurements.values():
        for measurement in measurements:
            assert (Path(measurement.record_dir) / "result.json").is_file()
    deploy = result.report["deploy"]
    assert "--args '--max-num-seqs 8'" in deploy["command"]
    assert deploy["body"]["backend_parameters"] == [
        "--tensor-parallel-size 2",
        "--gpu-memory-utilization 0.9",
        "--max-num-seqs 8",
        "--max-num-batched-tokens 8192",
    ]
    assert json.loads(result.report_json.read_text())["tune_id"] == result.tune_id
    assert BEST_LABEL in result.report_markdown.read_text()
    # The gain over the engine's defaults (tp 1 was pruned, so tp 2's), with both measured figures.
    [gain] = result.report["gains_over_each_engines_defaults"]
    assert gain["defaults"] == "vllm-double 1.0 tp2 defaults"
    markdown = result.report_markdown.read_text()
    assert "## Against each engine's defaults" in markdown
    if gain["defaults_meets_slos"]:
        assert gain["ratio"] == pytest.approx(gain["winner_throughput"] / gain["defaults_throughput"])
        assert gain["ratio"] > 1.5  # per request 30 + 16 ms against the defaults' 90 + 16 ms
        assert f"{gain['ratio']:.2f}x ({gain['winner_throughput']:,.1f} at load 8" in markdown
    else:  # a loaded machine pushed the defaults' 90 ms TTFT past the SLO's 150 ms
        assert gain["ratio"] is None
        assert "the defaults met the SLOs at no load (their best: " in markdown
    # Nothing left running on the server.
    assert tune_platform.deployments() == []


def test_tune_stops_at_its_run_budget_best_first(tune_platform: TunePlatform, tmp_path: Path) -> None:
    progress = CountingProgress()
    settings = TuneSettings(rungs=2, requests_per_point=16, growth=2, keep_ratio=2, max_measurements=6)
    result = tune(tune_platform, tmp_path, settings, progress)

    assert len(progress.finished) == 6
    assert [label for label, rung in progress.finished if rung == 1] == [BEST_LABEL]
    assert "run budget spent: 6 of 6" in result.report["stopped_reason"]


def test_tune_stops_before_a_run_that_would_pass_its_time_budget(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    # Each start and each run takes 10 s on this clock: after 2 runs 40 s are spent, and a third
    # (a start and a run, 20 s) would pass 45 s.
    progress = CountingProgress()
    settings = TuneSettings(rungs=2, requests_per_point=16, growth=2, keep_ratio=2, time_budget_s=45)
    result = tune(tune_platform, tmp_path, settings, progress, clock=SteppingClock(10.0))

    assert len(progress.finished) == 2
    assert result.report["spent_s"] == 40
    assert "time budget spent: 40 s of 45 s" in result.report["stopped_reason"]


def test_an_interrupted_tune_resumes_without_repeating_runs(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    first = CountingProgress(interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        tune(tune_platform, tmp_path, SETTINGS, first)
    assert tune_platform.deployments() == []

    second = CountingProgress()
    result = tune(tune_platform, tmp_path, SETTINGS, second)

    assert len(first.finished) + len(second.finished) == 8
    assert not set(first.finished) & set(second.finished)
    assert result.report["winners"][0]["label"] == BEST_LABEL
    journal = (result.folder / "journal.jsonl").read_text().splitlines()
    measured = [
        (e["candidate_id"], e["rung"]) for e in map(json.loads, journal) if e["kind"] == "measurement"
    ]
    assert len(measured) == len(set(measured)) == 8
