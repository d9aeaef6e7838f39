"""Candidates dropped before anything starts: the doctor's checks of the plan (flags of that
engine release, the parallel layout against the model and the GPUs, the memory knob) and the
estimator's verdict (weights + KV cache + overheads per GPU). A candidate with an error finding
is never launched; its reason is the first error's message and fix.

    kept, dropped = prune(candidates, model_facts, parse_gpu_specs("2xH100"))
    for drop in dropped:
        print(drop.candidate.label, drop.reason)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.errors import ModelyardError
from modelyard.estimate import GpuSpec, estimate_memory
from modelyard.modeldir import ModelFacts
from modelyard.secret_names import MASK, is_secret_env_name
from modelyard.tune.space import Candidate


@dataclass(frozen=True)
class Dropped:
    """A candidate left out, and why (``stage``: ``doctor``, ``estimate``, ``start`` or ``bench``)."""

    candidate: Candidate
    stage: str
    reason: str
    check_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate.candidate_id,
            "label": self.candidate.label,
            "stage": self.stage,
            "reason": self.reason,
            "check_ids": list(self.check_ids),
        }


@dataclass
class PruneOutcome:
    kept: list[Candidate] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    # What the estimator says each kept candidate holds: KV cache tokens per GPU, by candidate id.
    kv_cache_tokens: dict[str, int] = field(default_factory=dict)


def _reason(errors: Sequence[Finding], candidate: Candidate) -> str:
    first = errors[0]
    text = first.message + (f" (fix: {first.fix})" if first.fix else "")
    if len(errors) > 1:
        text += f"; and {len(errors) - 1} more error(s): " + ", ".join(error.check_id for error in errors[1:])
    for name, value in candidate.env:  # the report is written down: no secret in a reason
        if is_secret_env_name(name) and value:
            text = text.replace(value, MASK)
    return text


def prune(candidates: Sequence[Candidate], model: ModelFacts | None, gpus: Sequence[GpuSpec]) -> PruneOutcome:
    """Split ``candidates`` into those the doctor and the estimator let start, and the others."""
    outcome = PruneOutcome()
    for candidate in candidates:
        if candidate.gpu_count > len(gpus):
            outcome.dropped.append(
                Dropped(
                    candidate,
                    "doctor",
                    f"needs {candidate.gpu_count} GPUs (TP x PP); --gpus gives {len(gpus)}",
                )
            )
            continue
        own_gpus = list(gpus[: candidate.gpu_count])
        plan = DeploymentPlan(
            engine=candidate.engine.family,
            version=candidate.engine.checked_version,
            backend_parameters=candidate.arguments,
            env=dict(candidate.env),
            model=model,
            gpus=own_gpus,
        )
        findings = check_plan(plan)
        errors = [finding for finding in findings if finding.severity is Severity.ERROR]
        if errors:
            stage = "estimate" if all(error.check_id.startswith("memory.") for error in errors) else "doctor"
            check_ids = tuple(error.check_id for error in errors)
            outcome.dropped.append(Dropped(candidate, stage, _reason(errors, candidate), check_ids))
            continue
        outcome.kept.append(candidate)
        if model is not None and model.config:
            try:
                estimate = estimate_memory(
                    model,
                    candidate.engine.family,
                    own_gpus,
                    candidate.arguments,
                    engine_version=candidate.engine.checked_version,
                    env=dict(candidate.env),
                )
            except (ModelyardError, ArithmeticError, LookupError, TypeError, ValueError):
                continue  # the doctor said so already, as a warning
            outcome.kv_cache_tokens[candidate.candidate_id] = estimate.plan_on_total.kv_cache_tokens
    return outcome
