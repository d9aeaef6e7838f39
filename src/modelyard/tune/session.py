"""One ``modelyard tune``: the candidates, their pruning, the search, and the report files.

    request = TuneRequest(model="qwen3-8b", model_facts=facts, gpus_text="2xH100", ...)
    deployer_for = lambda tune_id: ServerDeployer(api, tune_id, "qwen3-8b")
    result = run_tune(request, data_dir, deployer_for=deployer_for)
    print(result.report["winners"])

The tune's id is the digest of what defines it (model, GPUs, workload, SLOs, search space, rung
sizes), not of its budgets: rerun it with a larger ``--max-runs`` or ``--budget`` and it goes on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelyard.estimate import GpuSpec
from modelyard.modeldir import ModelFacts
from modelyard.tune.contract import Deployer, TuneProgress
from modelyard.tune.journal import Journal
from modelyard.tune.measure import BenchMeasurer
from modelyard.tune.pruning import PruneOutcome, prune
from modelyard.tune.report import build_report, report_markdown
from modelyard.tune.slo import Slo
from modelyard.tune.space import Candidate, SearchSpace, generate_candidates
from modelyard.tune.tuner import Measurer, TuneOutcome, Tuner, TuneSettings
from modelyard.tune.workloads import Workload, write_prompts

REPORT_JSON = "report.json"
REPORT_MARKDOWN = "report.md"
PROMPTS_FILE = "prompts.jsonl"


@dataclass
class TuneRequest:
    model: str
    model_facts: ModelFacts | None
    gpus_text: str
    gpus: list[GpuSpec]
    workload: Workload
    slos: list[Slo]
    space: SearchSpace
    settings: TuneSettings = field(default_factory=TuneSettings)
    warmup_requests: int = 0
    knee_search: bool = False
    """The final rung searches the saturation knee (``measure.BenchMeasurer``)."""

    def arguments(self) -> dict[str, Any]:
        """What defines the tune (its id), budgets left out."""
        return {
            "model": self.model,
            "gpus": self.gpus_text,
            "workload": self.workload.to_json(),
            "slos": [slo.text for slo in self.slos],
            "space": self.space.to_json(),
            "rungs": self.settings.rungs,
            "requests_per_point": self.settings.requests_per_point,
            "growth": self.settings.growth,
            "keep_ratio": self.settings.keep_ratio,
            "warmup_requests": self.warmup_requests,
            "knee_search": self.knee_search,
        }


@dataclass
class TuneResult:
    tune_id: str
    folder: Path
    candidates: list[Candidate]
    pruned: PruneOutcome
    outcome: TuneOutcome
    report: dict[str, Any]
    report_json: Path
    report_markdown: Path


def plan_tune(request: TuneRequest) -> tuple[list[Candidate], PruneOutcome]:
    """The candidates and what the doctor and the estimator leave of them (nothing started)."""
    candidates = generate_candidates(request.space)
    return candidates, prune(candidates, request.model_facts, request.gpus)


def run_tune(
    request: TuneRequest,
    data_dir: Path,
    *,
    deployer_for: Callable[[str], Deployer],
    progress: TuneProgress | None = None,
    measurer: Measurer | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TuneResult:
    """Plan, prune, search (resuming what the journal holds), write ``report.json`` and
    ``report.md`` in the tune's folder. ``deployer_for(tune_id)`` makes the deployer."""
    journal = Journal.open(data_dir, request.arguments())
    candidates, pruned = plan_tune(request)
    settings = request.settings
    bench = BenchMeasurer(
        request.workload,
        journal.folder / PROMPTS_FILE,
        warmup_requests=request.warmup_requests,
        knee_search=request.knee_search,
        clock=clock,
    )
    deepest = settings.requests_at(settings.rungs - 1)
    if request.knee_search:
        deepest = bench.knee_requests(deepest)
    write_prompts(request.workload, deepest + request.warmup_requests, bench.prompts_file)
    measurer = measurer or bench
    tuner = Tuner(
        settings,
        pruned.kept,
        deployer_for(journal.tune_id),
        measurer,
        journal,
        request.slos,
        progress=progress,
        clock=clock,
    )
    outcome = tuner.run()
    report = build_report(
        tune_id=journal.tune_id,
        model=request.model,
        gpus=request.gpus_text,
        workload=request.workload,
        slos=request.slos,
        candidates=candidates,
        pruned=pruned.dropped,
        outcome=outcome,
        spent_s=journal.spent_s,
        start_count=len(journal.starts),
    )
    report_json = journal.folder / REPORT_JSON
    report_json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    markdown = journal.folder / REPORT_MARKDOWN
    markdown.write_text(report_markdown(report), encoding="utf-8")
    return TuneResult(
        journal.tune_id, journal.folder, candidates, pruned, outcome, report, report_json, markdown
    )
