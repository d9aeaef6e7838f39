"""The engine's memory knob against the GPUs, before any model is looked at.

Some starts fail whatever the model: vLLM asks for ``total x --gpu-memory-utilization`` and
refuses when less is free; versions whose utilization counts other processes' memory too have
nothing left when another engine holds it; a utilization that leaves too little outside the
budget runs out of memory while capturing CUDA graphs (an error where the share is raised above
vLLM's default; at the default or below, a warning: the graphs' size follows the model, and what
fits a small GPU captures small graphs). The rules per version are
``modelyard.estimate.budgets``. Ids (docs/doctor/memory.md): ``memory.free-memory-too-low``,
``memory.fraction-leaves-no-headroom``, ``memory.invalid-fraction``.

Usage::

    knob_findings("vllm", "0.25.0", parsed, parse_gpu_specs("1x24GB"), env={})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from modelyard.backends.parameters import ParsedParameters
from modelyard.doctor.findings import Finding, Severity
from modelyard.errors import InvalidInput
from modelyard.estimate.budgets import (
    vllm_default_utilization,
    vllm_graphs_in_budget,
    vllm_knob_counts_other_processes,
    vllm_outside_reserve_bytes,
)
from modelyard.estimate.gpus import GpuSpec

GIB = 1 << 30
VLLM_KNOB = "--gpu-memory-utilization"
SGLANG_KNOB = "--mem-fraction-static"


def _gib(size_bytes: float) -> str:
    return f"{size_bytes / GIB:.2f} GiB"


def _fraction(parsed: ParsedParameters, knob: str) -> tuple[float | None, list[Finding]]:
    try:
        value = parsed.number(knob)
    except InvalidInput:
        return None, []  # param.invalid-number names it
    if value is not None and not 0 < value <= 1:
        return None, [
            Finding(
                "memory.invalid-fraction",
                Severity.ERROR,
                f"{knob} {value:g} is not a fraction of the GPU's memory; the engine refuses it",
                fix=f"give {knob} a value above 0 and at most 1, e.g. 0.9",
            )
        ]
    return value, []


def knob_findings(
    engine: str,
    version: str | None,
    parsed: ParsedParameters,
    gpus: list[GpuSpec],
    env: Mapping[str, str] | None = None,
    graphs_in_budget: bool | None = None,
) -> list[Finding]:
    """``graphs_in_budget``: whether the model's start takes vLLM's CUDA graphs from the budget (the
    estimate's ``cuda_graphs_in_budget``, by release and model runner); None, with no model: from
    the version and env alone."""
    if not gpus:
        return []
    if engine == "sglang":
        return _fraction(parsed, SGLANG_KNOB)[1]
    if engine != "vllm":
        return []
    asked, findings = _fraction(parsed, VLLM_KNOB)
    if findings:
        return findings
    utilization = asked if asked is not None else vllm_default_utilization(version)
    shown = f"{VLLM_KNOB} {utilization:g}" + ("" if asked is not None else " (the default)")
    gpu = min(
        gpus,
        key=lambda spec: (
            spec.memory_free_bytes if spec.memory_free_bytes is not None else spec.memory_total_bytes
        ),
    )
    total = gpu.memory_total_bytes
    requested = total * utilization
    findings.extend(_free(version, env, gpu, utilization, requested, shown))
    if not findings:
        findings.extend(_headroom(version, env, parsed, gpu, utilization, shown, graphs_in_budget))
        if utilization <= vllm_default_utilization(version):
            findings = [_at_the_default(finding) for finding in findings]
    return findings


def _at_the_default(finding: Finding) -> Finding:
    """At vLLM's own default share (or below it) the start survives on any GPU a model fits: the
    graphs' size follows the model (vLLM logs 0.1-0.5 GiB for models of a few billion parameters,
    "1~3 GiB" for large ones), and the models that fit a small GPU capture small graphs. Only a
    share raised above the default takes the room the graphs need: the error stays for those."""
    if finding.check_id != "memory.fraction-leaves-no-headroom":
        return finding
    return replace(
        finding,
        severity=Severity.WARNING,
        message=finding.message.replace(
            ": the start runs out of memory (torch.OutOfMemoryError during CUDA graph capture)",
            "; this is vLLM's own default share, which starts where the model's graphs are small (a few "
            "hundred MiB for models that fit this GPU), and runs out of memory in CUDA graph capture "
            "where they are larger",
        ),
    )


def _free(
    version: str | None,
    env: Mapping[str, str] | None,
    gpu: GpuSpec,
    utilization: float,
    requested: float,
    shown: str,
) -> list[Finding]:
    free = gpu.memory_free_bytes
    if free is None:
        return []
    total = gpu.memory_total_bytes
    others = total - free
    details = {"free_bytes": free, "total_bytes": total, "requested_bytes": int(requested)}
    if vllm_knob_counts_other_processes(version, env):
        if requested - others > 0.05 * total:
            return []
        return [
            Finding(
                "memory.free-memory-too-low",
                Severity.ERROR,
                f"other processes hold {_gib(others)} of {gpu.name} and vLLM {version or ''} counts them in "
                f"{shown} ({_gib(requested)}): nothing is left for this engine's weights and KV cache "
                '("No available memory for the cache blocks")',
                fix=f"raise {VLLM_KNOB} to cover the other processes plus this engine "
                f"(above {(others / total) + 0.1:.2f}), or give this engine a GPU of its own, or upgrade "
                "vLLM (0.6.4+, and 0.8+ for the V1 engine, count only the engine's own memory)",
                details=details,
            )
        ]
    if requested <= free:
        return []
    usable = max(0.0, (free - GIB // 2) / total)
    return [
        Finding(
            "memory.free-memory-too-low",
            Severity.ERROR,
            f"{shown} asks for {_gib(requested)} of {gpu.name} but only {_gib(free)} is free "
            f"(other processes hold {_gib(others)}); vLLM refuses to start "
            '("Free memory on device ... is less than desired GPU '
            'memory utilization")',
            fix=f"free the GPU, or lower {VLLM_KNOB} to {int(usable * 100) / 100:.2f} or less",
            details=details,
        )
    ]


def _headroom(
    version: str | None,
    env: Mapping[str, str] | None,
    parsed: ParsedParameters,
    gpu: GpuSpec,
    utilization: float,
    shown: str,
    graphs_in_budget: bool | None,
) -> list[Finding]:
    eager = bool(parsed.switch("--enforce-eager"))
    inside = vllm_graphs_in_budget(version, env) if graphs_in_budget is None else graphs_in_budget
    needed = vllm_outside_reserve_bytes(version, enforce_eager=eager, env=env, graphs_in_budget=inside)
    outside = gpu.memory_total_bytes * (1 - utilization)
    if outside >= needed:
        return []
    safe = max(0.0, 1 - needed / gpu.memory_total_bytes)
    what = (
        "the allocator's slack (this start takes its CUDA graphs from the budget)"
        if inside or eager
        else "the CUDA graphs vLLM captures after sizing the KV cache (1~3 GiB, by vLLM's own log)"
    )
    return [
        Finding(
            "memory.fraction-leaves-no-headroom",
            Severity.ERROR,
            f"{shown} leaves {_gib(outside)} of {gpu.name} outside the engine's budget, less than the "
            f"{_gib(needed)} {what}: the start runs out of memory (torch.OutOfMemoryError during CUDA graph "
            "capture)",
            fix=f"lower {VLLM_KNOB} to {int(safe * 100) / 100:.2f}"
            + ("" if eager else ", or add --enforce-eager (no CUDA graphs, slower decoding)"),
            details={"outside_budget_bytes": int(outside), "needed_bytes": needed},
        )
    ]
