"""Checks of the flags against what the model's own config.json allows.

Ids: ``model.context-beyond-model`` (a context longer than the model's positions, without rope
scaling), ``model.dtype-unsupported-by-gpu`` (bfloat16 on GPUs before compute capability 8.0),
``model.quantization-mismatch`` (``--quantization`` naming another method than the checkpoint's),
``model.quantization-unsupported-by-gpu`` (a quantized checkpoint on a GPU older than its kernels need:
``quantization_capability``).
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.gpu_models import compute_capability
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.quantization_capability import (
    check_quantization_capability,
    check_quantization_known,
)
from modelyard.errors import InvalidInput
from modelyard.estimate.config_overrides import context_length_of, overridden_text_config
from modelyard.estimate.versions import version_before
from modelyard.modeldir import ModelFacts

# The length is the smallest length key of config.json (vllm/config/model.py
# _get_and_verify_max_len; sglang/srt/configs/model_config.py), after the command line's
# --hf-overrides / --rope-scaling / --json-model-override-args (estimate/config_overrides.py).
ALLOW_LONGER = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
}
CONTEXT_FLAGS = {"vllm": "--max-model-len", "sglang": "--context-length"}
# vLLM picks float16 by itself for bfloat16 checkpoints on GPUs without bfloat16 from 0.9.0
# (vllm-project/vllm#17265); before, --dtype auto refused them.
VLLM_BF16_FALLBACK_SINCE = "0.9.0"
# --quantization values that read a checkpoint of another declared method.
_COMPATIBLE_QUANTIZATION = {
    "gptq": {"gptq", "gptq_marlin", "gptq_marlin_24", "marlin", "gptq_bitblas", "moe_wna16"},
    "awq": {"awq", "awq_marlin", "moe_wna16"},
    "fp8": {"fp8", "fbgemm_fp8", "ptpc_fp8"},
    "compressed-tensors": {"compressed-tensors", "compressed_tensors"},
    "modelopt": {"modelopt", "modelopt_fp4", "modelopt_fp8"},
    "bitsandbytes": {"bitsandbytes"},
    "mxfp4": {"mxfp4"},
}


def check_model_config(context: ParameterContext) -> list[Finding]:
    model = context.model
    if model is None or context.engine not in CONTEXT_FLAGS:
        return []
    findings = _context_length(context, model)
    findings.extend(_dtype(context, model))
    findings.extend(_quantization(context, model))
    findings.extend(check_quantization_capability(context, model))
    findings.extend(check_quantization_known(context, model))
    return findings


def _context_length(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    flag = CONTEXT_FLAGS[context.engine]
    try:
        asked = context.parameters.integer(flag)
    except InvalidInput:
        return []  # param.invalid-number names a value that is not a number
    text_config = overridden_text_config(model.text_config, context.engine, context.parameters)
    derived = context_length_of(text_config)
    if asked is None or derived is None or asked <= derived[0]:
        return []
    variable = ALLOW_LONGER[context.engine]
    if context.engine_environment.get(variable, "").strip().lower() in {"1", "true", "yes"}:
        return []
    length, key = derived
    return [
        Finding(
            "model.context-beyond-model",
            Severity.ERROR,
            f"{flag} {asked:,} is longer than the model's {length:,} positions ({key} in config.json); "
            f"{context.label} refuses it",
            fix=f"lower {flag} to {length:,}; or, if the model is trained for longer, add rope scaling "
            '(vLLM: --hf-overrides \'{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, '
            f'"original_max_position_embeddings": {length}}}}}\'; SGLang: --json-model-override-args), or '
            f"set {variable}=1 to accept the longer length at your own risk",
            details={"asked": asked, "derived": length, "key": key},
        )
    ]


def _dtype(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    names = [gpu.name for gpu in context.gpus or []]
    old = [name for name in names if (capability := compute_capability(name)) and capability < (8, 0)]
    if not old:
        return []
    flag = (context.parameters.value_of("--dtype") or "auto").strip().lower()
    explicit = flag in {"bfloat16", "bf16"}
    declared = (model.dtype or "").lower() in {"bfloat16", "bf16"}
    if not explicit and not (flag == "auto" and declared):
        return []
    if (
        not explicit
        and context.engine == "vllm"
        and version_before(context.version, VLLM_BF16_FALLBACK_SINCE) is False
    ):
        return []  # vLLM >= 0.9 serves a bfloat16 checkpoint in float16 on these GPUs by itself
    if not explicit and context.engine != "vllm":
        return []
    capability = compute_capability(old[0])
    assert capability is not None
    return [
        Finding(
            "model.dtype-unsupported-by-gpu",
            Severity.ERROR,
            f"{old[0]} (compute capability {capability[0]}.{capability[1]}) has no bfloat16, and "
            + ("--dtype bfloat16 asks for it" if explicit else "the checkpoint is bfloat16 (--dtype auto)")
            + f'; {context.label} refuses to start ("Bfloat16 is only supported on GPUs with compute '
            'capability of at least 8.0")',
            fix="add --dtype half (float16)",
            details={"gpu": old[0], "compute_capability": f"{capability[0]}.{capability[1]}"},
        )
    ]


def _quantization(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    asked = (context.parameters.value_of("--quantization", "-q") or "").strip().lower()
    declared_config = model.quantization_config
    if not asked or not declared_config:
        return []
    declared = str(declared_config.get("quant_method") or "").lower()
    if not declared or asked == declared or asked in _COMPATIBLE_QUANTIZATION.get(declared, {declared}):
        return []
    return [
        Finding(
            "model.quantization-mismatch",
            Severity.ERROR,
            f"--quantization {asked} does not read this checkpoint: its config.json declares "
            f"quantization_config.quant_method {declared!r}; {context.label} refuses the mismatch",
            fix=f"remove --quantization (the engine reads {declared} from config.json), or give a {asked} "
            "checkpoint (a directory whose config.json matches it)",
            details={"asked": asked, "declared": declared},
        )
    ]
