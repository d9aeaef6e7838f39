"""A quantized checkpoint against the compute capability its kernels need
(``model.quantization-unsupported-by-gpu``), and against the methods the release has
(``model.quantization-unknown``).

Each engine checks a checkpoint's quantization config against the GPU before it loads a weight:
``get_min_capability()`` of the method (vLLM ``vllm/config`` ``_get_quantization_config``; SGLang
``model_config``), and compressed-tensors per scheme (``_check_scheme_supported``: "Quantization
scheme is not supported for the current GPU"). Where the minimum moved between releases, doctor
knows two bounds: below the lowest minimum any release has, every release refuses (an error);
between it and the highest, some releases refuse and some run (a warning that says which):

- AWQ 7.5 and GPTQ 6.0 in both engines (their configs' ``get_min_capability``).
- FP8 (``quant_method: fp8``) in vLLM: 8.9 before its weight-only Marlin fallback (0.5.1), 8.0
  with Marlin, 7.5 once Marlin ran on Turing (``is_fp8_marlin_supported``); every release in the
  flag tables (0.6.0 on) runs it from 8.0. In SGLang: ``Fp8Config.get_min_capability`` 8.0, and
  from 8.0 to 8.9 the linear layers go through Triton's e4m3 (fp8e4nv) kernels, which need 8.9,
  unless Marlin takes them (``SGLANG_FORCE_FP8_MARLIN=1``, or by itself on SM 8.0-8.8 in recent
  releases: ``can_auto_enable_marlin_fp8``).
- MXFP4 (gpt-oss) in vLLM: ``Mxfp4Config.get_min_capability`` 9.0 in the first releases, 8.0 later.
- compressed-tensors: weight-only integer schemes (W4A16, W8A16: ``CompressedTensorsWNA16``,
  Marlin) 8.0 ("ampere and up"), 7.5 where Marlin runs on Turing; W8A8 int8 7.5; float 8-bit
  weights as FP8 above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelyard.backends.flag_tables import available_versions, load_flag_table
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.gpu_models import compute_capability
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.estimate.versions import version_before
from modelyard.modeldir import ModelFacts

Capability = tuple[int, int]


@dataclass(frozen=True)
class CapabilityNeed:
    """``every``: below it every release refuses; ``some``: below it (and from ``every``) some do.
    ``scheme`` names the quantization in messages; ``releases`` says which releases refuse between
    the two bounds."""

    scheme: str
    every: Capability
    some: Capability
    releases: str = ""


_FP8 = {
    "vllm": CapabilityNeed("FP8", (7, 5), (8, 0), "vLLM releases before Marlin ran FP8 on Turing refuse it"),
    "sglang": CapabilityNeed(
        "FP8",
        (8, 0),
        (8, 9),
        "SGLang releases without the Marlin fallback fail in Triton's e4m3 (fp8e4nv) kernels; set "
        "SGLANG_FORCE_FP8_MARLIN=1 or use a release that enables Marlin on SM 8.0-8.8 by itself",
    ),
}
# vLLM's Mxfp4Config.get_min_capability: 90 when gpt-oss came (0.10.1), 80 later.
_MXFP4 = CapabilityNeed(
    "MXFP4", (8, 0), (9, 0), "the first vLLM releases with gpt-oss ran MXFP4 on Hopper only"
)
_WEIGHT_ONLY_INT = CapabilityNeed(
    "compressed-tensors weight-only int", (7, 5), (8, 0), "releases whose Marlin needs Ampere refuse it"
)
_W8A8_INT8 = CapabilityNeed("compressed-tensors W8A8 int8", (7, 5), (7, 5))
_METHODS = {"awq": CapabilityNeed("AWQ", (7, 5), (7, 5)), "gptq": CapabilityNeed("GPTQ", (6, 0), (6, 0))}


def quantization_need(engine: str, config: dict[str, Any]) -> CapabilityNeed | None:
    """What the checkpoint's ``quantization_config`` needs of the GPU in ``engine``; None where
    doctor does not know the scheme's minimum."""
    method = str(config.get("quant_method") or "").lower()
    if method in _METHODS:
        return _METHODS[method]
    if method == "fp8":
        return _FP8.get(engine)
    if method == "mxfp4" and engine == "vllm":
        return _MXFP4
    if method == "compressed-tensors":
        return _compressed_tensors_need(engine, config)
    return None


def _compressed_tensors_need(engine: str, config: dict[str, Any]) -> CapabilityNeed | None:
    groups = config.get("config_groups")
    if not isinstance(groups, dict):
        return None
    needs: list[CapabilityNeed] = []
    for group in groups.values():
        if not isinstance(group, dict):
            continue
        found = group.get("weights")
        weights: dict[str, Any] = found if isinstance(found, dict) else {}
        activations = group.get("input_activations")
        kind, bits = str(weights.get("type") or "").lower(), weights.get("num_bits")
        if kind == "int" and bits in (4, 8) and not activations:
            needs.append(_WEIGHT_ONLY_INT)
        elif kind == "int" and bits == 8 and isinstance(activations, dict):
            needs.append(_W8A8_INT8)
        elif kind == "float" and bits == 8 and engine in _FP8:
            needs.append(_FP8[engine])
    return max(needs, key=lambda need: (need.every, need.some), default=None)


def check_quantization_capability(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    need = quantization_need(context.engine, model.quantization_config or {})
    if need is None:
        return []
    for gpu in context.gpus or []:
        capability = compute_capability(gpu.name)
        if capability is None or capability >= need.some:
            continue
        refused_by_all = capability < need.every
        minimum = need.every if refused_by_all else need.some
        message = (
            f"the checkpoint is {need.scheme}-quantized, which needs compute capability "
            f"{minimum[0]}.{minimum[1]} or newer; {gpu.name} is {capability[0]}.{capability[1]}"
        )
        message += (
            f' and {context.label} refuses it ("is not supported for the current GPU")'
            if refused_by_all
            else f": {need.releases}"
        )
        return [
            Finding(
                "model.quantization-unsupported-by-gpu",
                Severity.ERROR if refused_by_all else Severity.WARNING,
                message,
                fix="use an unquantized float16 checkpoint or one quantized for this GPU (AWQ and GPTQ run "
                "from 7.5), or a newer GPU",
                details={"scheme": need.scheme, "gpu": gpu.name},
            )
        ]
    return []


def check_quantization_known(context: ParameterContext, model: ModelFacts) -> list[Finding]:
    """``model.quantization-unknown``: the checkpoint's ``quant_method`` is not a method this vLLM
    release has (``ModelConfig._verify_quantization``: "Unknown quantization method: X. Must be
    one of [...]"). The release's ``--quantization`` choices are its methods; releases whose table
    has no choices are not judged, nor names no release of the tables has (spelt otherwise)."""
    method = str((model.quantization_config or {}).get("quant_method") or "").lower()
    if context.engine != "vllm" or context.table is None or not method:
        return []
    known = _quantization_choices(context.table.version)
    if not known or method in known:
        return []
    having = [version for version in available_versions("vllm") if method in _quantization_choices(version)]
    if not having:
        return []
    newer = version_before(context.table.version, having[0])
    when = f"from {having[0]}" if newer else f"from {having[0]} to {having[-1]}"
    return [
        Finding(
            "model.quantization-unknown",
            Severity.ERROR,
            f"the checkpoint's quantization_config.quant_method is {method!r}, which {context.label} does "
            f'not have (vLLM lists it {when}): it refuses to start ("Unknown quantization method: {method}")',
            fix=f"use a vLLM release that has {method} ({having[0]} or later)"
            if newer
            else f"use a vLLM release that has {method} ({having[0]} to {having[-1]}), or a checkpoint "
            "quantized with a method this release has",
            details={"method": method, "first": having[0], "last": having[-1]},
        )
    ]


def _quantization_choices(version: str) -> frozenset[str]:
    table = load_flag_table("vllm", version)
    spec = table.lookup("--quantization") if table is not None else None
    return frozenset(spec.choices or ()) if spec is not None else frozenset()
