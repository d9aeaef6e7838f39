"""Log signatures of a KV-cache dtype the attention kernels cannot use on this GPU.

``--kv-cache-dtype fp8`` (``fp8_e4m3``) stores the cache as float8 e4m3; Triton compiles that type
(``fp8e4nv``) only for compute capability 8.9 and newer and refuses it below (``type fp8e4nv not
supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')``, from
Triton's CUDA backend). FlashInfer's MLA planner takes only float16, bfloat16 and float8_e4m3fn
(``MLA kv_data_type torch.uint8 is not supported``: vLLM hands it the cache as raw bytes for other
fp8 layouts).

Triton's refusal names a type, not what asked for it: an FP8 checkpoint (``quant_method: fp8``)
below 8.9 runs its linear layers through the same Triton kernels where the engine has no
weight-only path for the GPU (SGLang's block-FP8 GEMM before its Marlin fallback). Where the
arguments or the log show an FP8 KV cache it is the cache; where they show FP8 weights and no FP8
KV cache, the checkpoint (``log.quantization-unsupported-by-gpu``); with neither, both readings.
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature

# What the engines print of an FP8 KV cache (vLLM's engine config line ``kv_cache_dtype=fp8``,
# SGLang's ``server_args=ServerArgs(... kv_cache_dtype='fp8_e4m3' ...)``) and of FP8 weights
# (vLLM's ``quantization=fp8``, SGLang's "Detected fp8 checkpoint." and ``quant=fp8`` load line).
_FP8_KV_IN_LOG = re.compile(r"kv_cache_dtype[=:]\s*'?(?:torch\.)?(?:fp8|float8)", re.IGNORECASE)
_FP8_WEIGHTS_IN_LOG = re.compile(
    r"quantization[=:]\s*'?fp8|quant=fp8|Detected fp8 checkpoint|quant_method'?[=:]\s*'?fp8", re.IGNORECASE
)


def _fp8_kv_cache(text: str, context: LogContext) -> bool:
    asked = (context.flag_value("--kv-cache-dtype") or "").lower()
    return asked.startswith("fp8") or bool(_FP8_KV_IN_LOG.search(text))


def _kv_cache_reading(match: re.Match[str], text: str, context: LogContext) -> bool:
    return _fp8_kv_cache(text, context) or not _FP8_WEIGHTS_IN_LOG.search(text)


def _weights_reading(match: re.Match[str], text: str, context: LogContext) -> bool:
    return not _fp8_kv_cache(text, context)


def _explain_triton_fp8(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    supported = match["supported"]
    return (
        f"the GPU cannot run the float8 e4m3 KV cache that --kv-cache-dtype "
        f"{context.flag_value('--kv-cache-dtype') or 'fp8'} asks for: Triton compiles fp8e4nv only for "
        f"compute capability 8.9 and newer (this GPU takes {supported})",
        "use --kv-cache-dtype fp8_e5m2 (supported below 8.9), or auto (the model's dtype)",
    )


def _explain_triton_fp8_weights(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    sglang = context.is_sglang
    fallback = (
        "set SGLANG_FORCE_FP8_MARLIN=1 (weight-only FP8 through Marlin, compute capability 8.0 and newer) "
        "or upgrade SGLang to a release that falls back to Marlin by itself, or serve it with vLLM"
        if sglang
        else "let the engine use its weight-only Marlin FP8 path (vLLM does from compute capability 8.0)"
    )
    return (
        "the GPU cannot run the checkpoint's float8 e4m3 weights: with no FP8 KV cache asked, Triton's "
        f"fp8e4nv kernels (compute capability 8.9 and newer; this GPU takes {match['supported']}) are the "
        "FP8 linear layers' own",
        f"{fallback}, or use a non-FP8 checkpoint of the model (BF16, AWQ, GPTQ) on this GPU",
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
        applies=_kv_cache_reading,
    ),
    LogSignature(
        "log.quantization-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"type fp8e4nv not supported in this architecture\. The supported fp8 dtypes are "
            r"(?P<supported>\([^)\n]*\))"
        ),
        _explain_triton_fp8_weights,
        "triton/backends/nvidia/compiler.py; sglang/srt/layers/quantization/fp8.py (Fp8LinearMethod: "
        "Triton block-FP8 GEMM unless Marlin is used)",
        applies=_weights_reading,
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
