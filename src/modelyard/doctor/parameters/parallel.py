"""Checks of tensor parallelism against the GPUs given and the model's attention heads.

Ids: ``param.tensor-parallel-size``, ``param.tensor-parallel-heads``, ``param.mixed-gpus``.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext

SIZE_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "tensor": ("--tensor-parallel-size",),
        "pipeline": ("--pipeline-parallel-size",),
        "data": ("--data-parallel-size",),
    },
    "sglang": {
        "tensor": ("--tp-size", "--tensor-parallel-size"),
        "pipeline": ("--pp-size", "--pipeline-parallel-size"),
        "data": (),  # SGLang's --dp-size shares the tensor-parallel GPUs (DP attention)
    },
}
# Different boards, or the same board with memory differing by more than this, in one group.
MEMORY_TOLERANCE = 0.02


def _size(context: ParameterContext, kind: str) -> tuple[int, str | None]:
    names = SIZE_FLAGS.get(context.engine, {}).get(kind, ())
    if not names:
        return 1, None
    value = context.parameters.value_of(*names)
    if value is None:
        return 1, None
    try:
        return int(value), names[0]
    except ValueError:
        return 1, names[0]  # param.invalid-number names it


def check_parallel_sizes(context: ParameterContext) -> list[Finding]:
    if context.engine not in SIZE_FLAGS:
        return []
    findings: list[Finding] = []
    tensor, tensor_flag = _size(context, "tensor")
    pipeline, _ = _size(context, "pipeline")
    data, _ = _size(context, "data")
    flag_name = SIZE_FLAGS[context.engine]["tensor"][0]
    local_data = context.parameters.value_of("--data-parallel-size-local")
    if context.engine == "vllm" and local_data is not None and local_data.isdigit():
        data = int(local_data)  # data-parallel ranks on this node only
    needed = tensor * pipeline * data
    count = context.gpu_count
    if count is not None and count > 0 and needed != count and not _multi_node(context):
        shown = f"{flag_name} {tensor}" if tensor_flag else f"{flag_name} (default 1)"
        if pipeline > 1 or data > 1:
            shown += f" x pipeline {pipeline} x data {data}"
        if needed > count:
            findings.append(
                Finding(
                    "param.tensor-parallel-size",
                    Severity.ERROR,
                    f"{shown} needs {needed} GPUs but the deployment gives each replica {count}",
                    fix=f"set {flag_name} {count}, or give the deployment {needed} GPUs per replica",
                    details={"needed_gpus": needed, "given_gpus": count},
                )
            )
        else:
            findings.append(
                Finding(
                    "param.tensor-parallel-size",
                    Severity.WARNING,
                    f"the deployment gives each replica {count} GPUs but {shown} uses {needed}; "
                    f"the other {count - needed} sit idle",
                    fix=f"set {flag_name} {count}, or give the deployment {needed} GPU(s) per replica",
                    details={"needed_gpus": needed, "given_gpus": count},
                )
            )
    findings.extend(_heads(context, tensor, flag_name))
    findings.extend(_mixed(context))
    return findings


def _multi_node(context: ParameterContext) -> bool:
    """Runs that span nodes place ranks elsewhere; one node's GPU count cannot be checked."""
    parsed = context.parameters
    nodes = parsed.value_of("--nnodes")
    if nodes is not None and nodes.isdigit() and int(nodes) > 1:
        return True
    return parsed.find("--headless") is not None


def _heads(context: ParameterContext, tensor: int, flag_name: str) -> list[Finding]:
    if context.model is None or tensor <= 1:
        return []
    heads = context.model.text_config.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0 or heads % tensor == 0:
        return []
    divisors = [size for size in (1, 2, 4, 8, 16) if heads % size == 0]
    return [
        Finding(
            "param.tensor-parallel-heads",
            Severity.ERROR,
            f"{flag_name} {tensor} does not divide the model's {heads} attention heads; the engine refuses "
            "to shard it",
            fix=f"use a tensor-parallel size that divides {heads}: "
            + ", ".join(str(size) for size in divisors),
            details={"attention_heads": heads, "tensor_parallel_size": tensor},
        )
    ]


def _mixed(context: ParameterContext) -> list[Finding]:
    gpus = context.gpus or []
    if len(gpus) < 2:
        return []
    names = sorted({gpu.name for gpu in gpus})
    memories = [gpu.memory_total_bytes for gpu in gpus]
    spread = (max(memories) - min(memories)) / max(memories) if max(memories) else 0.0
    if len(names) == 1 and spread <= MEMORY_TOLERANCE:
        return []
    described = ", ".join(
        f"GPU {gpu.index}: {gpu.name} {gpu.memory_total_bytes / 2**30:.0f} GiB" for gpu in gpus
    )
    return [
        Finding(
            "param.mixed-gpus",
            Severity.WARNING,
            f"the GPUs of one tensor-parallel group differ ({described}); every shard runs at the pace of "
            "the slowest and fits the memory of the smallest",
            fix="give the deployment GPUs of one model and memory size (pin --gpus to matching indices)",
            details={"gpus": [gpu.index for gpu in gpus]},
        )
    ]
