"""Doctor on real failure reports (tests/doctor/corpus): every case is sourced, and each is caught.

The corpus is 60+ public issues from the vLLM, SGLang, GPUStack and Xinference trackers, each with
what the user had before the start and what the engine said (``modelyard.doctor.cases``).
``scripts/doctor_catch_rate.py`` prints the catch rate per category.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from modelyard.doctor.cases import CaseVerdict, catch_rates, evaluate_case, load_cases
from modelyard.doctor.log_signatures import SIGNATURES

CORPUS = Path(__file__).parent / "corpus"
DOCTOR = Path(__file__).resolve().parents[2] / "src" / "modelyard" / "doctor"
TRACKERS = re.compile(
    r"^https://github\.com/(vllm-project/[\w.-]+|sgl-project/[\w.-]+|gpustack/gpustack|xorbitsai/inference)"
    r"/issues/\d+$"
)
CATEGORIES = {"layout", "memory", "model-config", "environment", "launcher", "version", "flags", "log"}


@cache
def _verdicts() -> tuple[CaseVerdict, ...]:
    return tuple(evaluate_case(case) for case in load_cases(CORPUS))


def _ids_in_code() -> set[str]:
    ids: set[str] = set()
    for path in DOCTOR.rglob("*.py"):
        ids.update(re.findall(r"\"((?:param|model|memory|host|log)\.[a-z0-9-]+)\"", path.read_text()))
    return ids


def test_the_corpus_has_sixty_real_reports_from_the_engine_trackers() -> None:
    cases = load_cases(CORPUS)
    assert len(cases) >= 60
    assert len({case.source_url for case in cases}) >= 58  # two threads give two cases each
    for case in cases:
        assert TRACKERS.match(case.source_url), case.source_url
        assert case.category in CATEGORIES, case.name
        assert case.expected and set(case.expected) <= _ids_in_code(), case.name


@pytest.mark.parametrize("verdict", _verdicts(), ids=lambda verdict: verdict.case.name)
def test_each_real_failure_is_caught_before_start_or_from_its_log(verdict: CaseVerdict) -> None:
    before = sorted({finding.check_id for finding in verdict.before_start})
    log = sorted({finding.check_id for finding in verdict.from_log})
    assert verdict.caught != "missed", f"{verdict.case.source_url}: before start {before}, from the log {log}"


def test_most_failures_are_caught_before_the_engine_starts() -> None:
    counts = catch_rates(_verdicts())["all"]
    assert counts["before start"] / sum(counts.values()) >= 0.5


def test_every_log_signature_fires_on_a_real_report_or_fixture() -> None:
    fired = {finding.check_id for verdict in _verdicts() for finding in verdict.from_log}
    fixtures = Path(__file__).parent / "test_log_signatures.py"
    covered = set(re.findall(r"\"(log\.[a-z0-9-]+)\",?$", fixtures.read_text(), re.MULTILINE))
    assert {signature.check_id for signature in SIGNATURES} - fired - covered == set()
