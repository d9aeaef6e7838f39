"""Checks of the parallel layout (TP, PP, DP, EP, DP attention) against the GPUs and the model.

Ids: ``param.tensor-parallel-size`` (GPUs the layout needs against GPUs given),
``param.tensor-parallel-heads`` (attention and key-value heads per attention rank; in vLLM also the
vision encoder's heads, which its vision attention splits over the same tensor-parallel ranks with
``divide``, unless ``--mm-encoder-tp-mode data`` keeps the encoder whole),
``param.pipeline-layer-partition`` (layers per pipeline stage), ``param.expert-parallel-experts``
(experts per expert-parallel rank), ``param.data-parallel-attention`` (SGLang DP groups inside TP),
``param.mixed-gpus``. The layout itself is ``modelyard.estimate.layout``.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.estimate.layout import PP_PARTITION_VARIABLE, Layout, read_layout

# Different boards, or the same board with memory differing by more than this, in one group.
MEMORY_TOLERANCE = 0.02
LAYOUT_ENGINES = ("vllm", "sglang")


def context_layout(context: ParameterContext) -> Layout:
    return read_layout(context.engine, context.parameters, context.deployment_environment)


def check_layout(context: ParameterContext) -> list[Finding]:
    if context.engine not in LAYOUT_ENGINES:
        return []
    layout = context_layout(context)
    findings = _gpus(context, layout)
    findings.extend(_heads(context, layout))
    findings.extend(_vision_heads(context, layout))
    findings.extend(_pipeline(context, layout))
    findings.extend(_experts(context, layout))
    findings.extend(_data_parallel_attention(layout))
    findings.extend(_mixed(context, layout))
    return findings


def _gpus(context: ParameterContext, layout: Layout) -> list[Finding]:
    count = context.gpu_count
    needed = layout.gpus_needed
    if count is None or count <= 0 or needed == count:
        return []
    if layout.multi_node and (needed <= count or layout.ray_backend):
        return []  # the other ranks are on other nodes; Ray places them over the cluster
    shown = layout.describe()
    details = {"needed_gpus": needed, "given_gpus": count, "layout": shown}
    if needed > count:
        fix = f"give the deployment {needed} GPUs per replica, or lower the sizes to fit {count}"
        if context.engine == "vllm" and layout.world_size > count and not layout.ray_backend:
            fix += (
                "; to spread the ranks over a Ray cluster of several nodes add "
                "--distributed-executor-backend ray"
            )
        return [
            Finding(
                "param.tensor-parallel-size",
                Severity.ERROR,
                f"{shown} needs {needed} GPUs but the deployment gives each replica {count}; "
                f"{context.label} refuses to start (the ranks past GPU {count - 1} find no device)",
                fix=fix,
                details=details,
            )
        ]
    return [
        Finding(
            "param.tensor-parallel-size",
            Severity.WARNING,
            f"the deployment gives each replica {count} GPUs but {shown} uses {needed}; "
            f"the other {count - needed} sit idle",
            fix=f"raise the sizes to use all {count} GPUs (e.g. {layout.flag('tensor').split()[0]} {count}), "
            f"or give the deployment {needed} GPU(s) per replica",
            details=details,
        )
    ]


def _text_int(config: dict[str, object], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _kv_compatible(kv_heads: int) -> list[int]:
    return [size for size in (1, 2, 4, 8, 16) if kv_heads % size == 0 or size % kv_heads == 0]


def _divisors(number: int) -> list[int]:
    return [size for size in (1, 2, 4, 8, 16, 32) if number % size == 0]


def _heads(context: ParameterContext, layout: Layout) -> list[Finding]:
    if context.model is None:
        return []
    ranks = layout.attention_tensor_parallel
    if ranks <= 1:
        return []
    text = context.model.text_config
    heads = _text_int(text, "num_attention_heads", "n_head")
    kv_heads = _text_int(text, "num_key_value_heads", "multi_query_group_num") or heads
    flag = f"{layout.flag('tensor')}" + (" with DP attention" if ranks != layout.tensor_parallel else "")
    if heads is not None and heads % ranks:
        return [
            Finding(
                "param.tensor-parallel-heads",
                Severity.ERROR,
                f"{flag} splits attention over {ranks} GPUs, which does not divide the model's {heads} "
                f'attention heads; {context.label} refuses to shard it ("Total number of attention heads '
                f'({heads}) must be divisible by tensor parallel size ({ranks})")',
                fix=f"use a tensor-parallel size that divides {heads} "
                f"({', '.join(map(str, _divisors(heads)))}), "
                "and pipeline parallelism for the remaining GPUs (e.g. TP 2 x PP 3 on six)",
                details={"attention_heads": heads, "tensor_parallel_size": ranks},
            )
        ]
    if kv_heads is not None and kv_heads % ranks and ranks % kv_heads:
        return [
            Finding(
                "param.tensor-parallel-heads",
                Severity.ERROR,
                f"{flag} splits attention over {ranks} GPUs but the model has {kv_heads} key-value heads: "
                "they must split evenly over the GPUs or be replicated evenly (GPUs a multiple of them); "
                f"{context.label} fails while sharding the model",
                fix=f"use a tensor-parallel size that divides {kv_heads} or is a multiple of it "
                f"({', '.join(str(size) for size in _kv_compatible(kv_heads))})",
                details={"key_value_heads": kv_heads, "tensor_parallel_size": ranks},
            )
        ]
    return []


def _vision_heads(context: ParameterContext, layout: Layout) -> list[Finding]:
    """vLLM's vision towers (``Qwen2VisionAttention``, ``Glm4vVisionAttention``, ...) shard their heads
    over the tensor-parallel group: ``divide(num_heads, tp_size)`` asserts "12 is not divisible by 8"."""
    if context.engine != "vllm" or context.model is None or layout.tensor_parallel <= 1:
        return []
    if (context.parameters.value_of("--mm-encoder-tp-mode") or "").strip().lower() == "data":
        return []
    vision = context.model.config.get("vision_config")
    # InternViT pads its heads with dummy ones to a multiple of the TP size (intern_vit.py,
    # num_dummy_heads): 25 heads run on 8 GPUs.
    if not isinstance(vision, dict) or "intern" in str(vision.get("model_type", "")).lower():
        return []
    heads = _text_int(vision, "num_heads", "num_attention_heads")
    ranks = layout.tensor_parallel
    if heads is None or heads % ranks == 0:
        return []
    return [
        Finding(
            "param.tensor-parallel-heads",
            Severity.ERROR,
            f"{layout.flag('tensor')} splits the vision encoder's {heads} attention heads over {ranks} GPUs, "
            f'which does not divide them; {context.label} fails while loading it ("{heads} is not divisible '
            f'by {ranks}")',
            fix=f"use a tensor-parallel size that divides {heads} ({', '.join(map(str, _divisors(heads)))}) "
            "and pipeline parallelism for the remaining GPUs, or --mm-encoder-tp-mode data (vLLM 0.10.2 and "
            "later, where the model supports it) to keep the encoder whole on each GPU",
            details={"vision_attention_heads": heads, "tensor_parallel_size": ranks},
        )
    ]


def _pipeline(context: ParameterContext, layout: Layout) -> list[Finding]:
    layers = (
        _text_int(context.model.text_config, "num_hidden_layers", "num_layers") if context.model else None
    )
    findings: list[Finding] = []
    stages = layout.stage_layers
    raw = context.deployment_environment.get(PP_PARTITION_VARIABLE)
    if raw is not None and raw.strip() and stages is None:
        findings.append(
            Finding(
                "param.pipeline-layer-partition",
                Severity.ERROR,
                f"{PP_PARTITION_VARIABLE}={raw!r} is not a comma-separated list of layer counts",
                fix=f"write it as one count per pipeline stage, e.g. {PP_PARTITION_VARIABLE}=24,24",
            )
        )
    if stages is not None and context.engine == "vllm":
        if len(stages) != layout.pipeline_parallel:
            findings.append(
                Finding(
                    "param.pipeline-layer-partition",
                    Severity.ERROR,
                    f"{PP_PARTITION_VARIABLE} gives {len(stages)} stages but --pipeline-parallel-size is "
                    f"{layout.pipeline_parallel}; vLLM refuses the partition",
                    fix=f"give {layout.pipeline_parallel} layer counts, or drop the variable",
                    details={"stages": list(stages)},
                )
            )
        elif layers is not None and sum(stages) != layers:
            findings.append(
                Finding(
                    "param.pipeline-layer-partition",
                    Severity.ERROR,
                    f"{PP_PARTITION_VARIABLE}={','.join(map(str, stages))} places {sum(stages)} layers "
                    f"but the model has {layers}; vLLM refuses the partition",
                    fix=f"make the counts add up to {layers}",
                    details={"stages": list(stages), "layers": layers},
                )
            )
    if layers is not None and layout.pipeline_parallel > layers:
        findings.append(
            Finding(
                "param.pipeline-layer-partition",
                Severity.ERROR,
                f"{layout.flag('pipeline')} asks for {layout.pipeline_parallel} pipeline stages but the "
                f"model has {layers} layers",
                fix=f"use at most {layers} stages",
            )
        )
    return findings


def _experts(context: ParameterContext, layout: Layout) -> list[Finding]:
    if context.model is None:
        return []
    experts = _text_int(
        context.model.text_config, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"
    )
    if experts is None:
        return []
    if context.engine == "sglang" and layout.expert_parallel_size > 1:
        size = layout.expert_parallel_size
        if layout.tensor_parallel % size:
            return [
                Finding(
                    "param.expert-parallel-experts",
                    Severity.ERROR,
                    f"--ep-size {size} must divide the tensor-parallel size {layout.tensor_parallel} "
                    "(SGLang runs expert parallelism inside the TP group)",
                    fix=f"use --ep-size {layout.tensor_parallel} (or a divisor of it)",
                )
            ]
        if experts % size:
            return [
                Finding(
                    "param.expert-parallel-experts",
                    Severity.ERROR,
                    f"--ep-size {size} does not divide the model's {experts} experts",
                    fix=f"use an expert-parallel size that divides {experts}",
                )
            ]
    if context.engine == "vllm" and layout.expert_parallel and context.parameters.switch("--enable-eplb"):
        ranks = layout.moe_ranks
        redundant = (
            context.parameters.integer("--num-redundant-experts")
            if context.parameters.given("--num-redundant-experts")
            else 0
        )
        physical = experts + (redundant or 0)
        if ranks > 1 and physical % ranks:
            return [
                Finding(
                    "param.expert-parallel-experts",
                    Severity.ERROR,
                    f"with --enable-eplb the {physical} physical experts must split evenly over the "
                    f'{ranks} expert-parallel ranks (TP x DP); vLLM asserts "n_physical_experts={physical} '
                    f'must be divisible by ep_size={ranks}"',
                    fix="adjust --num-redundant-experts (or the EPLB config) so that experts + redundant "
                    f"experts is a multiple of {ranks}",
                    details={"experts": physical, "expert_parallel_ranks": ranks},
                )
            ]
    return []


def _data_parallel_attention(layout: Layout) -> list[Finding]:
    if layout.engine != "sglang" or not layout.data_parallel_attention or layout.data_parallel <= 1:
        return []
    if layout.tensor_parallel % layout.data_parallel == 0:
        return []
    return [
        Finding(
            "param.data-parallel-attention",
            Severity.ERROR,
            f"DP attention splits the {layout.tensor_parallel} tensor-parallel GPUs into "
            f"{layout.data_parallel} groups, which does not divide them; SGLang refuses the layout",
            fix=f"use a --dp-size that divides --tp-size {layout.tensor_parallel}",
        )
    ]


def _mixed(context: ParameterContext, layout: Layout) -> list[Finding]:
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
    if layout.pipeline_parallel > 1 and context.engine == "vllm":
        partition = context.deployment_environment.get(PP_PARTITION_VARIABLE)
        # vLLM splits the layers evenly over the stages (vllm/distributed/utils.py get_pp_indices) unless
        # VLLM_PP_LAYER_PARTITION says otherwise, and gives every rank the KV blocks of the one with the
        # fewest (vllm/v1/core/kv_cache_utils.py get_kv_cache_configs: the minimum over all ranks).
        message = (
            f"the pipeline stages run on GPUs of different memory ({described}); vLLM gives each stage "
            + ("the layers VLLM_PP_LAYER_PARTITION names" if partition else "an even share of the layers")
            + " and every stage the KV cache of the smallest, so the larger GPUs' extra memory is unused"
        )
        fix = (
            "keep VLLM_PP_LAYER_PARTITION's larger shares on the larger GPUs (the first stage runs on the "
            "first GPU)"
            if partition
            else f"set {PP_PARTITION_VARIABLE} (e.g. '40,24') to give the larger GPUs more layers, or give "
            "the deployment GPUs of one memory size"
        )
    else:
        message = (
            f"the GPUs of one tensor-parallel group differ ({described}); every shard runs at the pace of "
            "the slowest and fits the memory of the smallest"
        )
        fix = "give the deployment GPUs of one model and memory size (pin --gpus to matching indices)"
    return [
        Finding(
            "param.mixed-gpus",
            Severity.WARNING,
            message,
            fix=fix,
            details={"gpus": [gpu.index for gpu in gpus]},
        )
    ]
