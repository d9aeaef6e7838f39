"""Doctor on real failure reports (tests/doctor/corpus): every case is sourced; the fit part is
caught, the eval part is measured.

The corpus is 120+ public reports from the trackers of the engines (vLLM, SGLang, llama.cpp) and
of what launches them (GPUStack, Xinference, KServe, Ray, LiteLLM, ...), each with what the user had
before the start and what the engine said (``modelyard.doctor.cases``). It is split by source
thread (``split_of``): checks are written from the fit part, whose every case must be caught; the
eval part is a measurement, printed by ``test_the_eval_part_is_measured_per_category`` and by
``scripts/doctor_catch_rate.py``, and its misses fail nothing.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from modelyard.doctor.cases import (
    CaseVerdict,
    catch_rates,
    evaluate_case,
    load_cases,
    log_diagnosis_rate,
    rate_table,
    split_of,
)
from modelyard.doctor.log_signatures import SIGNATURES

CORPUS = Path(__file__).parent / "corpus"
DOCTOR = Path(__file__).resolve().parents[2] / "src" / "modelyard" / "doctor"
# A thread on a GitHub tracker (issue, pull request or discussion) or a forum.
THREADS = re.compile(
    r"^https://(github\.com/[\w.-]+/[\w.-]+/(issues|pull|discussions)/\d+"
    r"|discuss\.vllm\.ai/t/[\w-]+/\d+|discuss\.ray\.io/t/[\w-]+/\d+)$"
)
TRACKERS_BEFORE_SPLIT = re.compile(
    r"^https://github\.com/(vllm-project/[\w.-]+|sgl-project/[\w.-]+|gpustack/gpustack|xorbitsai/inference)"
    r"/issues/\d+$"
)
CATEGORIES = {"layout", "memory", "model-config", "environment", "launcher", "version", "flags", "log"}
CHECK_ID = re.compile(r"^(param|model|memory|host|log)\.[a-z0-9-]+$")


@cache
def _verdicts() -> tuple[CaseVerdict, ...]:
    return tuple(evaluate_case(case) for case in load_cases(CORPUS))


def _part(split: str) -> tuple[CaseVerdict, ...]:
    return tuple(verdict for verdict in _verdicts() if verdict.case.split == split)


def _fit_params() -> list[object]:
    """The fit part; a case no check catches yet (``known_miss``) is expected to be missed, and the
    test fails once it is caught, so that the mark goes."""
    return [
        pytest.param(
            verdict,
            marks=pytest.mark.xfail(strict=True, reason=verdict.case.known_miss),
            id=verdict.case.name,
        )
        if verdict.case.known_miss
        else pytest.param(verdict, id=verdict.case.name)
        for verdict in _part("fit")
    ]


def _ids_in_code() -> set[str]:
    ids: set[str] = set()
    for path in DOCTOR.rglob("*.py"):
        ids.update(re.findall(r"\"((?:param|model|memory|host|log)\.[a-z0-9-]+)\"", path.read_text()))
    return ids


def test_the_corpus_has_120_real_reports_each_with_its_source_thread() -> None:
    cases = load_cases(CORPUS)
    assert len(cases) >= 120
    assert len({case.source_url for case in cases}) >= 110  # a few threads give two cases
    for case in cases:
        assert THREADS.match(case.source_url), case.source_url
        assert case.category in CATEGORIES, case.name
        assert case.expected and all(CHECK_ID.match(check_id) for check_id in case.expected), case.name
        if case.seen_before_split:
            assert TRACKERS_BEFORE_SPLIT.match(case.source_url), case.name
        else:
            # The reports added with the split: 2025-2026 threads, with what the engine did.
            assert case.reported and case.reported[:4] in ("2025", "2026"), case.name
            assert case.engine_did is not None, case.name


def test_the_split_is_by_source_thread_about_sixty_forty() -> None:
    cases = load_cases(CORPUS)
    for case in cases:
        assert case.split == split_of(case.source_url), f"{case.name}: the file says {case.split}"
    fit = sum(1 for case in cases if case.split == "fit")
    assert 0.5 <= fit / len(cases) <= 0.7
    assert all(case.split == "fit" for case in cases if case.known_miss)


def test_the_fit_part_names_only_checks_that_exist_except_where_one_is_missing() -> None:
    known = _ids_in_code()
    for verdict in _part("fit"):
        if not verdict.case.known_miss:
            assert set(verdict.case.expected) <= known, verdict.case.name


@pytest.mark.parametrize("verdict", _fit_params())
def test_each_real_failure_of_the_fit_part_is_caught_before_start_or_from_the_log(
    verdict: CaseVerdict,
) -> None:
    before = sorted({finding.check_id for finding in verdict.before_start})
    log = sorted({finding.check_id for finding in verdict.from_log})
    assert verdict.caught != "missed", f"{verdict.case.source_url}: before start {before}, from the log {log}"


def test_most_failures_of_the_fit_part_are_caught_before_the_engine_starts() -> None:
    """Of the fit cases a check is written for (no ``known_miss``) whose cause a before-start check
    names (an ``expected`` id that is not ``log.*``), most are caught before start. Causes only the
    engine's log shows (an adapter's rank, a Ray placement, a hang) count in the catch rate, not here."""
    verdicts = [
        verdict
        for verdict in _part("fit")
        if not verdict.case.known_miss
        and any(not check_id.startswith("log.") for check_id in verdict.case.expected)
    ]
    counts = catch_rates(verdicts)["all"]
    assert counts["before start"] / sum(counts.values()) >= 0.7


def test_the_eval_part_is_measured_per_category(capsys: pytest.CaptureFixture[str]) -> None:
    """A measurement, not a gate: the table is printed; only its arithmetic is asserted."""
    verdicts = list(_verdicts())
    rates = catch_rates(verdicts, "eval")
    assert sum(rates["all"].values()) == len(_part("eval"))
    assert sum(sum(counts.values()) for key, counts in rates.items() if key != "all") == len(_part("eval"))
    logs = log_diagnosis_rate(verdicts)
    assert logs.named_cause <= logs.diagnosed <= logs.logs
    with capsys.disabled():
        print(f"\ndoctor on the eval part ({len(_part('eval'))} reports):\n{rate_table(verdicts, 'eval')}")
        print(
            f"verbatim startup logs: {logs.logs}, diagnosed {logs.diagnosed}, "
            f"naming the cause {logs.named_cause}"
        )


def test_every_log_signature_fires_on_a_real_report_or_fixture() -> None:
    fired = {finding.check_id for verdict in _verdicts() for finding in verdict.from_log}
    fixtures = Path(__file__).parent / "test_log_signatures.py"
    covered = set(re.findall(r"\"(log\.[a-z0-9-]+)\",?$", fixtures.read_text(), re.MULTILINE))
    assert {signature.check_id for signature in SIGNATURES} - fired - covered == set()
