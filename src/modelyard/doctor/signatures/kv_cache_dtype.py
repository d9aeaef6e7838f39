"""Log signatures of a KV-cache dtype the attention kernels cannot use on this GPU.

``--kv-cache-dtype fp8`` (``fp8_e4m3``) stores the cache as float8 e4m3; Triton compiles that type
(``fp8e4nv``) only for compute capability 8.9 and newer and refuses it below (``type fp8e4nv not
supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')``, from
Triton's CUDA backend). FlashInfer's MLA planner takes only float16, bfloat16 and float8_e4m3fn
(``MLA kv_data_type torch.uint8 is not supported``: vLLM hands it the cache as raw bytes for other
fp8 layouts).
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature


def _explain_triton_fp8(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    supported = match["supported"]
    return (
        f"the GPU cannot run the float8 e4m3 KV cache that --kv-cache-dtype "
        f"{context.flag_value('--kv-cache-dtype') or 'fp8'} asks for: Triton compiles fp8e4nv only for "
        f"compute capability 8.9 and newer (this GPU takes {supported})",
        "use --kv-cache-dtype fp8_e5m2 (supported below 8.9), or auto (the model's dtype)",
    )


def _explain_attention_backend(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    given = context.flag_value("--kv-cache-dtype")
    flag = f"--kv-cache-dtype {given}" if given else "--kv-cache-dtype"
    return (
        f"the attention backend refused the KV-cache dtype ({match['dtype']}) that {flag} gives it; "
        f"it takes {match['supported']}",
        "use --kv-cache-dtype auto, or the fp8 variant the backend names (fp8_e4m3), or pick another "
        "attention backend for the model (--attention-backend / VLLM_ATTENTION_BACKEND)",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.kv-cache-dtype-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"type fp8e4nv not supported in this architecture\. The supported fp8 dtypes are "
            r"(?P<supported>\([^)\n]*\))"
        ),
        _explain_triton_fp8,
        "triton/backends/nvidia/compiler.py (supported_fp8_dtypes: fp8e4nv from capability 89)",
    ),
    LogSignature(
        "log.kv-cache-dtype-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"kv_data_type (?P<dtype>torch\.\w+) is not supported(?: by the \w+ backend)?\. "
            r"Supported dtypes: (?P<supported>\[[^\]\n]*\])"
        ),
        _explain_attention_backend,
        "flashinfer/mla.py (BatchMLAPagedAttentionWrapper.plan: supported_kv_dtypes)",
    ),
)
