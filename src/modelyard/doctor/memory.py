"""The estimator's verdict as doctor findings (``memory.*`` ids, documented in docs/doctor/memory.md).

The estimator (``modelyard.estimate``) computes; doctor judges. Keeping the findings here keeps
the imports one way: doctor imports estimate, never the reverse.

Usage::

    estimate = estimate_memory(facts, "vllm", gpus, parameters)
    for finding in memory_findings(estimate):
        print(finding.severity, finding.message, finding.fix)
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.estimate.estimate_result import MemoryEstimate, correction_summary
from modelyard.estimate.kv_cache import kv_dtype_bytes
from modelyard.estimate.layout import PP_PARTITION_VARIABLE

GIB = 1 << 30


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / GIB:.1f} GiB"


def _fit_fix(estimate: MemoryEstimate) -> str:
    knob = estimate.memory_knob
    context_flag = "--max-model-len" if estimate.engine == "vllm" else "--context-length"
    options: list[str] = []
    if estimate.recommended_memory_fraction is not None:
        options.append(f"set {knob} {estimate.recommended_memory_fraction:.2f}")
    if estimate.max_context_tokens_at_safe_fraction > 0:
        safe = estimate.safe_memory_fraction
        options.append(
            f"lower {context_flag} to {estimate.max_context_tokens_at_safe_fraction:,} "
            f"(the most that fits at {knob} {safe})"
        )
    if kv_dtype_bytes(estimate.cache.kv_dtype) >= 2:
        options.append("use --kv-cache-dtype fp8 to halve the KV cache")
    stage = _limiting_stage_text(estimate)
    if stage and estimate.engine == "vllm":
        layers = ",".join(str(part.last_layer - part.first_layer + 1) for part in estimate.stages)
        options.append(
            f"give {stage} fewer layers with {PP_PARTITION_VARIABLE} (now {layers}; the counts must add up "
            "to the model's layers)"
        )
    options.append("or spread the model over more GPUs (tensor parallel)")
    return "; ".join(options)


def _limiting_stage_text(estimate: MemoryEstimate) -> str:
    """``pipeline stage 2 of 2 (layers 16-31 on RTX 3090, 24.0 GiB)``, or "" without PP."""
    if estimate.limiting_stage is None or len(estimate.stages) < 2:
        return ""
    stage = estimate.stages[estimate.limiting_stage]
    return (
        f"pipeline stage {stage.index + 1} of {len(estimate.stages)} (layers {stage.first_layer}-"
        f"{stage.last_layer} on {stage.gpu.name}, {_gib(stage.gpu.memory_total_bytes)})"
    )


def _on_stage(estimate: MemoryEstimate) -> str:
    stage = _limiting_stage_text(estimate)
    return f" on {stage}" if stage else ""


def memory_findings(estimate: MemoryEstimate) -> list[Finding]:
    """``memory.*`` findings for one estimate: errors refuse a deployment, warnings are shown."""
    findings: list[Finding] = []
    total = estimate.plan_on_total
    free = estimate.plan_on_free
    details = {
        "engine": estimate.engine,
        "context_tokens": estimate.context_tokens,
        "kv_cache_tokens": total.kv_cache_tokens,
        "max_concurrency": total.max_concurrency,
        "weights_bytes_per_gpu": estimate.weights_bytes,
        "memory_fraction": estimate.memory_fraction,
        "recommended_memory_fraction": estimate.recommended_memory_fraction,
        "correction": estimate.correction.to_json() if estimate.correction is not None else None,
        "uncorrected_kv_cache_tokens": (
            estimate.uncorrected_plan_on_total.kv_cache_tokens
            if estimate.uncorrected_plan_on_total is not None
            else None
        ),
    }
    if estimate.limiting_stage is not None:
        details["pipeline_stage"] = estimate.limiting_stage
        details["stage_kv_cache_tokens"] = [stage.kv_cache_tokens for stage in estimate.stages]
    # "; corrected by 3 starts on this cluster (these settings), last error +0.4 %: KV cache
    # -0.52 GiB per GPU (-7.0 %), 74,576 tokens before correction (69,360 after)"
    summary = correction_summary(estimate, on_total=True)
    corrected = f"; {summary}" if summary is not None else ""
    knob = f"{estimate.memory_knob} {estimate.memory_fraction}"
    if total.kv_cache_bytes <= 0:
        findings.append(
            Finding(
                "memory.weights-do-not-fit",
                Severity.ERROR,
                f"weights take {_gib(estimate.weights_bytes)} per GPU and leave no room for the KV cache on "
                f"{estimate.gpu.name} ({_gib(estimate.gpu.memory_total_bytes)}) under {knob}"
                + _on_stage(estimate),
                fix=_fit_fix(estimate),
                details=details,
            )
        )
    elif not total.fits:
        findings.append(
            Finding(
                "memory.kv-cache-does-not-fit",
                Severity.ERROR,
                f"the KV cache holds {total.kv_cache_tokens:,} tokens per GPU under {knob}, less than one "
                f"sequence of {estimate.context_tokens:,} tokens" + _on_stage(estimate),
                fix=_fit_fix(estimate),
                details=details,
            )
        )
    if free is not None and total.fits and not free.fits:
        severity = Severity.ERROR if estimate.engine == "vllm" else Severity.WARNING
        findings.append(
            Finding(
                "memory.free-memory-too-low",
                severity,
                f"{free.problem} (other processes hold "
                f"{_gib(estimate.gpu.memory_total_bytes - free.gpu_memory_bytes)} of {estimate.gpu.name})",
                fix=f"free the GPU, or {_fit_fix(estimate)}",
                details={**details, "free_bytes": free.gpu_memory_bytes},
            )
        )
    findings.extend(_headroom(estimate, details))
    if total.fits:
        findings.append(
            Finding(
                "memory.summary",
                Severity.INFO,
                f"{estimate.engine} on {estimate.gpu_count} x {estimate.gpu.name}: weights "
                f"{_gib(estimate.weights_bytes)} per GPU, KV cache {_gib(total.kv_cache_bytes)} = "
                f"{total.kv_cache_tokens:,} tokens "
                f"({estimate.cache.kv_dtype}), {total.max_concurrency}x sequences of "
                f"{estimate.context_tokens:,} tokens{corrected}",
                details=details,
            )
        )
    return findings


def _headroom(estimate: MemoryEstimate, details: dict[str, object]) -> list[Finding]:
    """Too little memory outside the engine's budget for what lives there: the CUDA context and
    CUDA graphs (vLLM), plus activations (SGLang), or a fraction above the safe maximum."""
    safe = estimate.safe_memory_fraction
    if estimate.memory_fraction <= safe:
        return []
    outside = int(estimate.gpu.memory_total_bytes * (1 - estimate.memory_fraction))
    activations = ", activations" if estimate.engine == "sglang" else ""
    return [
        Finding(
            "memory.fraction-leaves-no-headroom",
            Severity.WARNING,
            f"{estimate.memory_knob} {estimate.memory_fraction} leaves {_gib(outside)} outside the engine's "
            f"budget, too little for the CUDA context and graphs{activations}: out-of-memory errors under "
            "load are likely",
            fix=f"use {estimate.memory_knob} {safe} or lower",
            details={**details, "outside_budget_bytes": outside, "safe_memory_fraction": safe},
        )
    ]
