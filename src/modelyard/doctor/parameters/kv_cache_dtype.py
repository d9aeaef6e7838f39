"""``--kv-cache-dtype fp8`` on a GPU whose attention kernels cannot store float8 e4m3
(``param.kv-cache-dtype-unsupported-by-gpu``).

vLLM's ``fp8`` is ``fp8_e4m3``. From 0.8 (the V1 engine; V0 is gone in 0.11) the cache is read by
the attention backend vLLM picks for the GPU (``vllm/platforms/cuda.py``): FlashAttention needs
compute capability 8.0 and FlashInfer 7.5, so a Volta GPU (7.0) gets the Triton backend only, and
Triton compiles the e4m3 type (``fp8e4nv``) from capability 8.9 on (its CUDA backend's
``supported_fp8_dtypes``): the first forward pass fails with "type fp8e4nv not supported in this
architecture" (an error). Between 7.5 and 8.9 it depends on the backend chosen (FlashInfer takes
it, Triton refuses it): a warning. ``fp8_e5m2`` (``fp8e5``) compiles everywhere. V0 (before 0.8,
or ``VLLM_USE_V1=0``) converts e4m3 in its own CUDA kernels on any GPU: nothing to say.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.gpu_models import compute_capability
from modelyard.doctor.parameters.context import ParameterContext

E4M3_NAMES = frozenset({"fp8", "fp8_e4m3"})
# Triton's fp8e4nv needs this compute capability; FlashInfer's kernels need TURING and up.
TRITON_E4M3_CAPABILITY = (8, 9)
FLASHINFER_CAPABILITY = (7, 5)
FIRST_V1_RELEASE = (0, 8)


def _release(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.lstrip("v").split(".")[:2]:
        digits = "".join(character for character in piece if character.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _runs_v1(context: ParameterContext) -> bool:
    """Whether the release reads the cache through V1's attention backends (an unknown one: yes)."""
    if context.version and _release(context.version) < FIRST_V1_RELEASE:
        return False
    return context.engine_environment.get("VLLM_USE_V1", "1").strip() != "0"


def check_kv_cache_dtype(context: ParameterContext) -> list[Finding]:
    if context.engine != "vllm" or not context.gpus:
        return []
    dtype = context.parameters.value_of("--kv-cache-dtype")
    if dtype is None or dtype.strip().lower() not in E4M3_NAMES or not _runs_v1(context):
        return []
    known = [(gpu.name, capability) for gpu in context.gpus if (capability := compute_capability(gpu.name))]
    if not known:
        return []
    name, capability = min(known, key=lambda item: item[1])
    if capability >= TRITON_E4M3_CAPABILITY:
        return []
    shown = f"{capability[0]}.{capability[1]}"
    details: dict[str, object] = {"gpu": name, "compute_capability": shown, "kv_cache_dtype": dtype}
    fix = "use --kv-cache-dtype fp8_e5m2 (float8 that every GPU's kernels take), or auto (the model's dtype)"
    if capability < FLASHINFER_CAPABILITY:
        return [
            Finding(
                "param.kv-cache-dtype-unsupported-by-gpu",
                Severity.ERROR,
                f"--kv-cache-dtype {dtype} stores the KV cache as float8 e4m3, which the {name} (compute "
                f"capability {shown}) cannot run in {context.label}: its only attention backend there is "
                "Triton's, and Triton compiles e4m3 (fp8e4nv) from capability 8.9 on; the first forward "
                "pass fails",
                fix=fix,
                details=details,
            )
        ]
    return [
        Finding(
            "param.kv-cache-dtype-unsupported-by-gpu",
            Severity.WARNING,
            f"--kv-cache-dtype {dtype} (float8 e4m3) on the {name} (compute capability {shown}) works only "
            f"where {context.label} picks FlashInfer for attention: Triton's backend compiles e4m3 from "
            "capability 8.9 on and fails with 'type fp8e4nv not supported in this architecture'",
            fix=f"{fix}; or pin the backend that takes it (VLLM_ATTENTION_BACKEND=FLASHINFER)",
            details=details,
        )
    ]
