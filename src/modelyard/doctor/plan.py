"""Every check doctor can make of a planned start, from what a user has before it starts.

A plan is the engine and its version, the backend parameters and env as typed, the model's
config.json facts, the GPUs (names, memory, free memory when known) and the machine
(``HostFacts``): no model directory, no running engine. ``check_plan`` runs the parameter checks
(flags, layout, the model's config, the environment, the machine) and the memory fit.
``preflight.preflight_deployment`` adds the model directory checks to it.

Usage::

    plan = DeploymentPlan(
        engine="vllm", version="0.25.0", backend_parameters="--tensor-parallel-size 2",
        env={}, model=read_model_facts(path), gpus=parse_gpu_specs("2xH100"),
    )
    for finding in check_plan(plan):
        print(finding.severity, finding.check_id, finding.message)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from modelyard.backends.parameters import ParsedParameters
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.graph_headroom import graph_headroom_findings
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.memory import memory_findings
from modelyard.doctor.memory_knob import knob_findings
from modelyard.doctor.parameters import ParameterContext, bounded, run_parameter_checks
from modelyard.errors import ModelyardError
from modelyard.estimate import GpuSpec, estimate_memory
from modelyard.estimate.correction import StartObservation, apply_correction, correction_for, start_key
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts

logger = logging.getLogger(__name__)
MEMORY_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class DeploymentPlan:
    """What is about to start. ``gpus`` are one replica's GPUs; ``gpu_count`` stands in when only
    their number is known. ``model_argument`` is what the engine gets as the model when it is not
    a local directory of modelyard's (a hub id, in plans for other launchers)."""

    engine: str
    version: str | None
    backend_parameters: str | list[str]
    env: dict[str, str] | list[str] | str = field(default_factory=dict)
    model: ModelFacts | None = None
    gpus: list[GpuSpec] = field(default_factory=list)
    gpu_count: int | None = None
    host: HostFacts | None = None
    deployment_name: str | None = None
    model_argument: str | None = None
    # This installation's starts of the engine version: the estimate is corrected by them.
    start_observations: tuple[StartObservation, ...] = ()
    # True where ``backend_parameters`` is another launcher's command list, each item one argument
    # to the engine (Compose, Kubernetes, GPUStack), not modelyard's lines split by shell rules.
    items_are_arguments: bool = False
    # ``backend_parameters`` parsed on the version's flag table, when the caller has it already.
    parsed: ParsedParameters | None = None


def _gpu_infos(gpus: list[GpuSpec]) -> list[GpuInfo]:
    return [
        GpuInfo(
            index=index,
            uuid=f"PLANNED-{index}",
            name=gpu.name,
            memory_total_bytes=gpu.memory_total_bytes,
            memory_free_bytes=gpu.memory_free_bytes
            if gpu.memory_free_bytes is not None
            else gpu.memory_total_bytes,
            memory_used_bytes=0,
        )
        for index, gpu in enumerate(gpus)
    ]


def plan_context(plan: DeploymentPlan) -> ParameterContext:
    infos = _gpu_infos(plan.gpus) if plan.gpus else None
    return ParameterContext.build(
        engine=plan.engine,
        version=plan.version,
        backend_parameters=plan.backend_parameters,
        env=plan.env,
        deployment_name=plan.deployment_name,
        model=plan.model,
        gpus=infos,
        gpu_count=plan.gpu_count if plan.gpu_count is not None else (len(plan.gpus) if plan.gpus else None),
        host=plan.host,
        model_argument=plan.model_argument,
        items_are_arguments=plan.items_are_arguments,
        parsed=plan.parsed,
    )


def check_plan(plan: DeploymentPlan) -> list[Finding]:
    """The parameter, model-config, environment, machine and memory findings of ``plan``."""
    context = plan_context(plan)
    findings = run_parameter_checks(context)
    findings.extend(plan_memory_findings(context, plan.gpus, plan.start_observations))
    return bounded(findings)


def plan_memory_findings(
    context: ParameterContext, gpus: list[GpuSpec], observations: Sequence[StartObservation] = ()
) -> list[Finding]:
    """The memory knob against the GPUs (no model needed), then the estimator's fit (with one)."""
    if context.engine not in MEMORY_ENGINES or not gpus:
        return []
    if context.parameters.split_errors:
        return []  # param.unbalanced-quote / param.split-flag name the broken line
    findings = knob_findings(
        context.engine, context.version, context.parameters, gpus, context.engine_environment
    )
    if context.model is None or not context.model.config:
        return findings
    needed = context_gpus_needed(context)
    if len(gpus) < needed:
        return findings  # param.tensor-parallel-size names the missing GPUs
    try:
        estimate = estimate_memory(
            context.model,
            context.engine,
            gpus,
            context.parameters,
            engine_version=context.version,
            env=context.engine_environment,
        )
    except ModelyardError as error:
        return [*findings, _estimate_failed(str(error), error.hint or "")]
    except (ArithmeticError, LookupError, TypeError, ValueError) as error:
        # A config the estimator cannot read must not block a deployment: say so, and go on.
        logger.exception("memory estimate failed for %s", context.model.directory)
        return [*findings, _estimate_failed(f"{type(error).__name__}: {error}", "")]
    if context.engine == "vllm":
        # The knob's headroom again, now that the model says where its CUDA graphs are counted.
        findings = knob_findings(
            context.engine,
            context.version,
            context.parameters,
            gpus,
            context.engine_environment,
            graphs_in_budget=estimate.cuda_graphs_in_budget,
        )
    if observations and context.version:
        key = start_key(
            estimate,
            engine_version=context.version,
            architecture=context.model.architecture,
            parameters=context.parameters,
        )
        correction = correction_for(key, observations, now=datetime.now(UTC))
        if correction is not None:
            estimate = apply_correction(estimate, correction)
    # The engine's own failure (SGLang's graph capture) replaces the estimator's warning of that id.
    findings.extend(
        graph_headroom_findings(estimate, cuda_graphs=not context.parameters.switch("--disable-cuda-graph"))
    )
    reported = {finding.check_id for finding in findings}
    return [
        *findings,
        *(finding for finding in memory_findings(estimate) if finding.check_id not in reported),
    ]


def context_gpus_needed(context: ParameterContext) -> int:
    from modelyard.doctor.parameters.layout import context_layout

    return context_layout(context).gpus_needed


def _estimate_failed(reason: str, hint: str) -> Finding:
    return Finding(
        "memory.estimate-failed",
        Severity.INFO,
        f"the memory fit could not be estimated: {reason}",
        fix=hint or "check the model's config.json; run `modelyard estimate` for details",
    )
