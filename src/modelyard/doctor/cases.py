"""Real failure reports as case files, and doctor's verdict on each: caught before start, from the log,
or missed.

A case (YAML, ``tests/doctor/corpus/``) is one public report: its source URL, what the user had
before the start (engine and version, backend parameters, env, the model's config.json facts,
the GPUs, the machine) and what the engine said. ``evaluate_case`` runs ``check_plan`` on the
plan and ``diagnose_log`` on the log; a case counts as caught when a finding names its cause
(one of its ``expected`` ids) at error severity.

Case fields: ``source_url``, ``summary``, ``category``, ``engine``, ``engine_version`` (null when
the report does not say), ``backend_parameters``, ``env``, ``gpus`` (``2xRTX3090``) and/or
``gpu_count``, ``gpu_free_gib``, ``host`` (``in_container``, ``shm_bytes``, ``driver_version``,
``ports_in_use``), ``model_argument``, ``config`` or ``config_file``, ``log`` or ``log_file``,
``stalled``, ``expected``, ``batch`` (the collection round), ``items_are_arguments`` (the
launcher hands each list item to the engine as one argument: a Compose command list);
``log_is_outcome: true`` when the outcome is the engine's own words.
Reports added from 2025 on also give ``reported`` (the date of the post the case is read from),
``engine_did`` (``exited``, ``hung``, ``served wrong``: what the engine did), and ``log_verbatim``
(the ``log`` is the report's own startup-log lines, copied, not retold). A fit case no check
catches yet says what is missing in ``known_miss`` (the corpus test expects it to be missed, and
fails once a check catches it, so that the mark is removed).

The corpus is split by source thread (``split_of``: a hash of the thread's URL, about 60 % fit,
40 % eval), and each case file says its part (``split``). Checks are written from the fit part
only; the eval part measures them. ``seen_before_split: true`` marks the reports that checks had
been written from before the split existed (their eval figure is not a blind one);
``seen_after_split`` (the round, e.g. ``2026-12``) marks the eval reports whose misses were studied
by class when a later round widened the checks: they stay in the eval part, out of its blind figure.
Each round's new reports are measured blind first (``batch``) and keep that figure in their commit.

Usage::

    verdict = evaluate_case(load_case(Path("tests/doctor/corpus/vllm-596-llama2-13b-tp3.yaml")))
    verdict.caught     # "before start", "from the log" or "missed"
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from modelyard.backends.parameters import parse_backend_parameters
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.log_signatures import diagnose_log
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.estimate.gpus import GIB, GpuSpec, parse_gpu_specs
from modelyard.modeldir import ModelFacts

Caught = Literal["before start", "from the log", "missed"]
Split = Literal["fit", "eval"]
EngineDid = Literal["exited", "hung", "served wrong"]
SPLITS: tuple[Split, ...] = ("fit", "eval")
ENGINE_DID: tuple[EngineDid, ...] = ("exited", "hung", "served wrong")
# The share of source threads in the fit part, in percent.
FIT_PERCENT = 60
# A report that says the start hung is a log with no new line for at least this long (a report that
# quotes no line is a log that stopped before its first one).
STALLED_SECONDS = 3600.0


@dataclass(frozen=True)
class FailureCase:
    path: Path
    source_url: str
    summary: str
    category: str
    engine: str
    version: str | None
    backend_parameters: str | list[str]
    env: dict[str, str]
    gpus: list[GpuSpec]
    gpu_count: int | None
    host: HostFacts
    model: ModelFacts | None
    model_argument: str | None
    log: str
    stalled: bool
    expected: tuple[str, ...]
    launcher: str | None = None
    split: Split = "fit"
    reported: str | None = None
    engine_did: EngineDid | None = None
    log_verbatim: bool = False
    seen_before_split: bool = False
    # The round whose checks were written after studying this eval report's miss (not blind since).
    seen_after_split: str | None = None
    # A case of the fit part that no check catches yet: what is missing (the test expects it to fail).
    known_miss: str | None = None
    # The report's launcher passes each item of ``backend_parameters`` to the engine as one argument.
    items_are_arguments: bool = False
    # The collection round the report was added in (``2026-12 blind``: measured before any check was
    # written from it), so that each round's blind figure can be printed again later.
    batch: str | None = None

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass(frozen=True)
class CaseVerdict:
    case: FailureCase
    before_start: list[Finding] = field(default_factory=list)
    from_log: list[Finding] = field(default_factory=list)

    def names_cause(self, findings: list[Finding]) -> bool:
        """A finding names the cause at the engine's severity: an error where the engine fails, or
        at least a warning where it survives and serves wrongly (``engine_did: served wrong``)."""
        severities = {Severity.ERROR}
        if self.case.engine_did == "served wrong":
            severities.add(Severity.WARNING)
        return any(
            finding.check_id in self.case.expected and finding.severity in severities for finding in findings
        )

    @property
    def caught(self) -> Caught:
        if self.names_cause(self.before_start):
            return "before start"
        if self.names_cause(self.from_log):
            return "from the log"
        return "missed"


def split_of(source_url: str) -> Split:
    """The part a source thread belongs to: fixed by the thread's URL, so that every case read from
    one thread lands in the same part, and a new case never moves an old one."""
    thread = source_url.strip().rstrip("/").split("#", 1)[0].lower()
    bucket = int(hashlib.sha256(thread.encode()).hexdigest()[:8], 16) % 100
    return "fit" if bucket < FIT_PERCENT else "eval"


def _choice(path: Path, data: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if str(value) not in allowed:
        raise ValueError(f"{path}: {key} is {value!r}; expected one of {', '.join(allowed)}")
    return str(value)


def _host(data: dict[str, Any] | None, env: dict[str, str]) -> HostFacts:
    data = data or {}
    shm = data.get("shm_bytes")
    return HostFacts(
        in_container=bool(data.get("in_container", False)),
        shm_bytes=int(shm) if shm is not None else None,
        driver_version=str(data["driver_version"]) if data.get("driver_version") else None,
        ports_in_use=frozenset(int(port) for port in data.get("ports_in_use") or ()),
        environment={},
        hub_cache_dir=Path("/nonexistent/hub-cache"),
    )


def _gpus(data: dict[str, Any]) -> list[GpuSpec]:
    spec = data.get("gpus")
    if not spec:
        return []
    gpus = parse_gpu_specs(str(spec))
    free = data.get("gpu_free_gib")
    if free is None:
        return gpus
    return [GpuSpec(gpu.name, gpu.memory_total_bytes, int(float(free) * GIB)) for gpu in gpus]


def _model(path: Path, data: dict[str, Any]) -> ModelFacts | None:
    if data.get("config_file"):
        config = yaml.safe_load((path.parent / data["config_file"]).read_text(encoding="utf-8"))
    else:
        config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: config must be a mapping")
    config = {key: value for key, value in config.items() if not key.startswith("_")}
    return ModelFacts(directory=Path(f"/corpus/{path.stem}"), config=config) if config else None


def load_case(path: Path) -> FailureCase:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    env = {str(key): str(value) for key, value in (data.get("env") or {}).items()}
    log = data.get("log") or (data.get("outcome") if data.get("log_is_outcome") else "") or ""
    if data.get("log_file"):
        log = (path.parent / data["log_file"]).read_text(encoding="utf-8")
    version = data.get("engine_version")
    return FailureCase(
        path=path,
        source_url=str(data["source_url"]),
        summary=str(data.get("summary", "")),
        category=str(data["category"]),
        engine=str(data["engine"]),
        version=str(version) if version is not None else None,
        backend_parameters=data.get("backend_parameters") or "",
        env=env,
        gpus=_gpus(data),
        gpu_count=int(data["gpu_count"]) if data.get("gpu_count") is not None else None,
        host=_host(data.get("host"), env),
        model=_model(path, data),
        model_argument=data.get("model_argument"),
        log=str(log),
        stalled=bool(data.get("stalled", False)),
        expected=tuple(data.get("expected") or ()),
        launcher=data.get("launcher"),
        split=cast(Split, _choice(path, data, "split", SPLITS) or split_of(str(data["source_url"]))),
        reported=str(data["reported"]) if data.get("reported") else None,
        engine_did=cast(EngineDid | None, _choice(path, data, "engine_did", ENGINE_DID)),
        log_verbatim=bool(data.get("log_verbatim", False)),
        seen_before_split=bool(data.get("seen_before_split", False)),
        seen_after_split=str(data["seen_after_split"]) if data.get("seen_after_split") else None,
        known_miss=str(data["known_miss"]) if data.get("known_miss") else None,
        items_are_arguments=bool(data.get("items_are_arguments", False)),
        batch=str(data["batch"]) if data.get("batch") else None,
    )


def load_cases(directory: Path) -> list[FailureCase]:
    return [load_case(path) for path in sorted(directory.glob("*.yaml"))]


def evaluate_case(case: FailureCase) -> CaseVerdict:
    plan = DeploymentPlan(
        engine=case.engine,
        version=case.version,
        backend_parameters=case.backend_parameters,
        env=case.env,
        model=case.model,
        gpus=case.gpus,
        gpu_count=case.gpu_count if case.gpu_count is not None else (len(case.gpus) or None),
        host=case.host,
        model_argument=case.model_argument,
        items_are_arguments=case.items_are_arguments,
    )
    before = check_plan(plan)
    arguments = parse_backend_parameters(case.backend_parameters).argv
    from_log = (
        diagnose_log(
            case.log,
            engine=case.engine,
            engine_args=arguments,
            stalled_seconds=STALLED_SECONDS if case.stalled else None,
        )
        if case.log.strip() or case.stalled
        else []
    )
    return CaseVerdict(case=case, before_start=before, from_log=from_log)


def catch_rates(verdicts: Iterable[CaseVerdict], split: Split | None = None) -> dict[str, Counter[Caught]]:
    """Per category (and ``all``): how many cases were caught before start, from the log, or missed;
    only the cases of ``split`` when given."""
    rates: dict[str, Counter[Caught]] = {}
    for verdict in verdicts:
        if split is not None and verdict.case.split != split:
            continue
        for key in (verdict.case.category, "all"):
            rates.setdefault(key, Counter())[verdict.caught] += 1
    return rates


@dataclass(frozen=True)
class LogDiagnosisRate:
    """Of the cases whose log is the report's verbatim startup lines: how many get any error or
    warning from ``diagnose_log``, and how many get one that names the cause."""

    logs: int
    diagnosed: int
    named_cause: int


def log_diagnosis_rate(verdicts: Iterable[CaseVerdict], split: Split | None = None) -> LogDiagnosisRate:
    logs = diagnosed = named = 0
    for verdict in verdicts:
        if not verdict.case.log_verbatim or (split is not None and verdict.case.split != split):
            continue
        logs += 1
        diagnosed += any(finding.severity is not Severity.INFO for finding in verdict.from_log)
        named += verdict.names_cause(verdict.from_log)
    return LogDiagnosisRate(logs=logs, diagnosed=diagnosed, named_cause=named)


def rate_table(verdicts: list[CaseVerdict], split: Split | None = None) -> str:
    """The catch rate per category as a plain-text table (``scripts/doctor_catch_rate.py``)."""
    rates = catch_rates(verdicts, split)
    lines = [f"{'category':<14}{'cases':>6}{'before start':>15}{'from the log':>15}{'missed':>12}"]
    for category in sorted(rates, key=lambda key: (key == "all", key)):
        counts = rates[category]
        total = sum(counts.values())
        kinds: tuple[Caught, ...] = ("before start", "from the log", "missed")
        cells = [f"{counts[kind]} ({counts[kind] / total:.0%})" for kind in kinds]
        lines.append(f"{category:<14}{total:>6}{cells[0]:>15}{cells[1]:>15}{cells[2]:>12}")
    return "\n".join(lines)
