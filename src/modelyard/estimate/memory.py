"""Will a model fit, and how many KV-cache tokens will the engine get? ``estimate_memory`` answers.

Each engine splits GPU memory its own way:

- vLLM: ``--gpu-memory-utilization`` (default 0.92 from 0.25, 0.9 before) is a fraction of TOTAL
  memory for everything. KV cache = total x fraction - weights - peak activations - non-torch
  memory; CUDA graphs are captured afterwards in the memory the fraction leaves out. It refuses to
  start when total x fraction exceeds the memory free at start, or when one sequence of
  ``--max-model-len`` does not fit in the cache.
- SGLang: ``--mem-fraction-static`` covers weights plus the KV pool, as a fraction of the memory
  free before loading. KV pool = free x fraction - weights (hybrid linear-attention models give
  0.9/1.9 of it to the recurrent-state pool). Activations and CUDA graphs live in the rest.

Usage::

    facts = read_model_facts(Path("/models/Qwen3-32B"))
    estimate = estimate_memory(facts, "vllm", parse_gpu_specs("2x48GB"), ["--tensor-parallel-size 2"])
    estimate.plan_on_total.kv_cache_tokens, estimate.plan_on_total.fits, estimate.recommended_memory_fraction
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from modelyard.backends.parameters import ParsedParameters
from modelyard.errors import InvalidInput
from modelyard.estimate.architecture import ModelShape, read_model_shape
from modelyard.estimate.config_overrides import context_length_of, overridden_text_config
from modelyard.estimate.engine_arguments import EngineArguments, parse_engine_arguments, parsed_parameters
from modelyard.estimate.estimate_result import Basis, MemoryEstimate, MemoryPlan
from modelyard.estimate.gpus import GIB, GpuSpec
from modelyard.estimate.graph_budget import vllm_graph_bytes, vllm_graphs_counted
from modelyard.estimate.kv_cache import CacheShape, cache_shape, known_kv_dtype, serving_dtype
from modelyard.estimate.kv_tokens import VLLM_BLOCK_TOKENS, sequences_cache_bytes
from modelyard.estimate.kv_tokens import kv_tokens_from_bytes as kv_tokens_from_bytes
from modelyard.estimate.layout import Layout, read_layout
from modelyard.estimate.overheads import (
    CUDA_CONTEXT_BYTES,
    ENCODER_ACTIVATION_BYTES,
    NON_TORCH_PARALLEL_EXTRA_BYTES,
    SGLANG_MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES,
    SGLANG_MULTIMODAL_PRELOAD_BYTES,
    VLLM_CUDA_GRAPH_BYTES,
    activation_bytes,
    batched_tokens_default,
    max_sequences_default,
    non_torch_bytes,
    sglang_04_chunked_prefill,
    sglang_04_cuda_graph_max_batch,
    sglang_04_memory_fraction,
    sglang_cuda_graph_bytes,
    sglang_default_memory_fraction,
    vllm_v0_batched_tokens,
)
from modelyard.estimate.speculative import SpeculativeMemory, speculative_memory, with_speculative_cache
from modelyard.estimate.stages import StageEstimate
from modelyard.estimate.weights import (
    WeightParts,
    dtype_bytes,
    parts_from_config,
    parts_from_headers,
    pipeline_stages,
    weight_bytes_per_gpu,
    weight_bytes_per_stage,
)
from modelyard.modeldir import ModelFacts

logger = logging.getLogger(__name__)

# Above these the engine has too little room left for activation spikes under load.
SAFE_MAX_FRACTION = {"vllm": 0.95, "sglang": 0.95}
# What a busy GPU must keep free beyond what vLLM asks for: its CUDA context and allocator.
BUSY_GPU_MARGIN_BYTES = GIB


@dataclass(frozen=True)
class _Inputs:
    layout: Layout
    shape: ModelShape
    arguments: EngineArguments
    parts: WeightParts
    cache: CacheShape
    gpu: GpuSpec
    weights_bytes: int
    activation_bytes: int
    cuda_graph_bytes: int
    non_torch_bytes: int
    context_tokens: int
    fraction: float
    fraction_is_default: bool
    encoder_loaded: bool
    multimodal: bool
    # vLLM subtracts its CUDA graphs from the KV budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).
    graphs_in_budget: bool = False
    # The pipeline stage these inputs describe (None: the largest share of every stage).
    stage: int | None = None
    # A draft model's (or MTP layers') weights and KV, counted in ``weights_bytes`` and ``cache``.
    speculative: SpeculativeMemory | None = None
    stage_layers: range | None = None


def _v1_forced(env: Mapping[str, str] | None) -> bool:
    """``VLLM_USE_V1=1`` runs the V1 engine in releases that still default to V0 (0.7)."""
    return (env or {}).get("VLLM_USE_V1", "").strip() == "1"


def _version_before(version: str | None, limit: tuple[int, int]) -> bool:
    if not version:
        return False
    numbers = [int(part) for part in version.split(".")[:2] if part.isdigit()]
    return len(numbers) == 2 and (numbers[0], numbers[1]) < limit


# --quantization values that quantize an unquantized checkpoint while loading, to 1 byte a weight.
ONLINE_FP8 = {"fp8", "fbgemm_fp8", "ptpc_fp8"}


def _weight_parts(model: ModelFacts, shape: ModelShape, arguments: EngineArguments) -> WeightParts:
    """Weights as loaded: from the safetensors headers when the files are here, else computed from
    config.json in the dtype the engine serves (``--dtype``), quantized online with
    ``--quantization fp8`` when the checkpoint is not quantized already."""
    if model.weights is not None and model.weights.total_bytes > 0:
        return parts_from_headers(model.weights, shape)
    quantization = model.quantization_config
    dtype = model.dtype
    if not quantization:
        dtype = serving_dtype(model.dtype, arguments.dtype)
        if (arguments.quantization or "").lower() in ONLINE_FP8:
            quantization = {"quant_method": "fp8"}
    return parts_from_config(shape, dtype, quantization)


def _prepare(
    model: ModelFacts,
    engine: str,
    gpus: Sequence[GpuSpec],
    parameters: Sequence[str] | ParsedParameters,
    version: str | None,
    env: Mapping[str, str] | None = None,
) -> _Inputs:
    parsed = parsed_parameters(engine, parameters, version)
    arguments = parse_engine_arguments(engine, parsed, version)
    layout = read_layout(engine, parsed, env, strict=True)
    if not gpus:
        raise InvalidInput("no GPU to estimate for", hint="give --gpus COUNTxSIZE, e.g. --gpus 2x48GB")
    if layout.gpus_needed > len(gpus):
        raise InvalidInput(
            f"{layout.describe()} needs {layout.gpus_needed} GPUs, but {len(gpus)} given",
            hint="give as many GPUs as TP x PP x DP, or lower the parallel sizes",
        )
    shape = read_model_shape(model.config)
    if shape.layer_count == 0 or shape.hidden_size == 0:
        raise InvalidInput(
            f"config.json of {model.directory} has no num_hidden_layers/hidden_size",
            hint="the estimator reads the text model's shape from config.json (text_config if multimodal)",
        )
    group = list(gpus[: layout.gpus_needed])
    gpu = min(
        group, key=lambda spec: (spec.memory_free_bytes or spec.memory_total_bytes, spec.memory_total_bytes)
    )
    parts = _weight_parts(model, shape, arguments)
    multimodal = parts.encoder_bytes > 0 or shape.encoder_parameter_count > 0
    encoder_loaded = multimodal and not arguments.language_only
    weights = weight_bytes_per_gpu(
        parts,
        shape.layer_count,
        layout.tensor_parallel,
        layout.pipeline_parallel,
        load_encoder=encoder_loaded,
        load_mtp=arguments.speculative_mtp,
        moe_ranks=layout.moe_ranks,
        stage_layers=layout.stage_layers,
        attention_tensor_parallel=layout.attention_tensor_parallel,
        replicate_embeddings=layout.replicates_embeddings,
        engine=engine,
        replicate_encoder=arguments.encoder_data_parallel,
    )
    cache = cache_shape(
        shape,
        model.model_type,
        model.dtype,
        model.quantization_config,
        arguments,
        attention_tensor_parallel=layout.attention_tensor_parallel,
        stages=pipeline_stages(shape.layer_count, layout.pipeline_parallel, layout.stage_layers, engine),
    )
    speculative = speculative_memory(
        arguments,
        shape,
        cache,
        tensor_parallel=layout.tensor_parallel,
        attention_tensor_parallel=layout.attention_tensor_parallel,
    )
    cache = with_speculative_cache(cache, speculative)
    if speculative is not None:
        weights += speculative.weights_bytes
    serving_bytes = dtype_bytes(serving_dtype(model.dtype, arguments.dtype))
    derived = context_length_of(overridden_text_config(model.text_config, engine, parsed))
    context = arguments.context_tokens or (derived[0] if derived else None) or 4096
    v0_engine = engine == "vllm" and _version_before(version, (0, 8)) and not _v1_forced(env)
    old_sglang = engine == "sglang" and _version_before(version, (0, 5))
    if arguments.batched_tokens:
        batched = arguments.batched_tokens
    elif v0_engine:
        batched = vllm_v0_batched_tokens(context, arguments.chunked_prefill)
    elif old_sglang:
        batched = sglang_04_chunked_prefill(gpu.memory_total_bytes)
    else:
        batched = batched_tokens_default(engine, gpu.memory_total_bytes, gpu.name)
    if engine == "vllm" and not v0_engine and cache.sliding_window_tokens:
        admission = min(cache.sliding_window_tokens - 1 + batched, context)
        cache = replace(cache, sliding_admission_tokens=admission)
    sequences = arguments.max_sequences or max_sequences_default(
        "vllm", gpu.memory_total_bytes, gpu.name, arguments.tensor_parallel
    )
    activations = activation_bytes(
        shape, batched, sequences, serving_bytes, layout.tensor_parallel, legacy_engine=v0_engine
    )
    if encoder_loaded:
        activations += ENCODER_ACTIVATION_BYTES
    legacy_vllm = engine == "vllm" and _version_before(version, (0, 25))
    if arguments.cuda_graph_max_batch:
        graph_batch = arguments.cuda_graph_max_batch
    elif old_sglang:
        graph_batch = sglang_04_cuda_graph_max_batch(gpu.memory_total_bytes, arguments.tensor_parallel)
    else:
        graph_batch = max_sequences_default(
            "sglang", gpu.memory_total_bytes, gpu.name, arguments.tensor_parallel
        )
    prefill_graphs = _sglang_prefill_graphs(model.config, shape, encoder_loaded)
    if arguments.enforce_eager:
        graphs = 0
    elif engine == "vllm":
        full = max(VLLM_CUDA_GRAPH_BYTES * shape.hidden_size // 4096, VLLM_CUDA_GRAPH_BYTES // 4)
        graphs = vllm_graph_bytes(full, sequences, arguments.speculative_tokens, batched)
    else:
        graphs = sglang_cuda_graph_bytes(batched, graph_batch, prefill_graphs=prefill_graphs)
    if arguments.memory_fraction is not None:
        fraction, is_default = arguments.memory_fraction, False
    elif engine == "vllm":
        fraction, is_default = (0.9 if legacy_vllm else 0.92), True
    elif old_sglang:
        fraction, is_default = (
            sglang_04_memory_fraction(layout.tensor_parallel * layout.pipeline_parallel),
            True,
        )
    else:
        encoder_shape = _encoder_layers_hidden(model.config) if encoder_loaded else None
        fraction = sglang_default_memory_fraction(
            gpu.memory_total_bytes,
            arguments.tensor_parallel,
            arguments.pipeline_parallel,
            batched,
            graph_batch,
            not arguments.enforce_eager,
            encoder_shape,
            prefill_graphs=prefill_graphs,
        )
        is_default = True
    return _Inputs(
        layout=layout,
        shape=shape,
        arguments=arguments,
        parts=parts,
        cache=cache,
        gpu=gpu,
        weights_bytes=weights,
        activation_bytes=activations,
        cuda_graph_bytes=graphs,
        non_torch_bytes=non_torch_bytes(layout.gpus_needed, legacy_engine=v0_engine),
        context_tokens=context,
        fraction=fraction,
        fraction_is_default=is_default,
        encoder_loaded=encoder_loaded,
        multimodal=multimodal,
        graphs_in_budget=engine == "vllm"
        and not v0_engine
        and vllm_graphs_counted(
            version,
            env,
            [str(name) for name in model.config.get("architectures") or []],
            moe=shape.is_moe,
            quantized=bool(model.quantization_config or arguments.quantization),
            hybrid=shape.is_hybrid_linear or bool(cache.state_bytes_per_sequence),
        ),
        speculative=speculative,
    )


def _stage_inputs(model: ModelFacts, gpus: Sequence[GpuSpec], inputs: _Inputs) -> list[_Inputs]:
    """One set of inputs per pipeline stage: the stage's own GPU (the smallest of the GPUs that
    run it), its layers' weights and its layers' cache. Without pipeline parallelism, ``inputs``."""
    layout = inputs.layout
    if layout.pipeline_parallel <= 1:
        return [inputs]
    ranges = pipeline_stages(
        inputs.shape.layer_count, layout.pipeline_parallel, layout.stage_layers, layout.engine
    )
    weights = weight_bytes_per_stage(
        inputs.parts,
        inputs.shape.layer_count,
        layout.tensor_parallel,
        layout.pipeline_parallel,
        load_encoder=inputs.encoder_loaded,
        load_mtp=inputs.arguments.speculative_mtp,
        moe_ranks=layout.moe_ranks,
        stage_layers=layout.stage_layers,
        attention_tensor_parallel=layout.attention_tensor_parallel,
        replicate_embeddings=layout.replicates_embeddings,
        engine=layout.engine,
        replicate_encoder=inputs.arguments.encoder_data_parallel,
    )
    stages: list[_Inputs] = []
    for index, layers in enumerate(ranges):
        group = [gpus[number] for number in layout.stage_gpu_indices(index) if number < len(gpus)]
        gpu = min(
            group or [inputs.gpu],
            key=lambda spec: (spec.memory_free_bytes or spec.memory_total_bytes, spec.memory_total_bytes),
        )
        cache = cache_shape(
            inputs.shape,
            model.model_type,
            model.dtype,
            model.quantization_config,
            inputs.arguments,
            attention_tensor_parallel=layout.attention_tensor_parallel,
            stages=[layers],
        )
        stage_weights = weights[index]
        if index == len(ranges) - 1 and inputs.speculative is not None:
            # The draft (or the MTP layers) runs beside the last stage, whose output it continues.
            cache = with_speculative_cache(cache, inputs.speculative)
            stage_weights += inputs.speculative.weights_bytes
        stages.append(
            replace(
                inputs, gpu=gpu, weights_bytes=stage_weights, cache=cache, stage=index, stage_layers=layers
            )
        )
    return stages


def _limiting_stage(stages: list[_Inputs], engine: str) -> tuple[_Inputs, list[StageEstimate]]:
    """The stage whose cache holds the fewest tokens (a stage that does not fit first), and every
    stage's figures. The engines size all stages to the smallest one's blocks."""
    summaries: list[StageEstimate] = []
    ranked: list[tuple[tuple[bool, int], int]] = []
    for number, stage in enumerate(stages):
        gpu = stage.gpu
        total = _plan(stage, engine, "total", gpu.memory_total_bytes)
        free = (
            _plan(stage, engine, "free", gpu.memory_free_bytes) if gpu.memory_free_bytes is not None else None
        )
        judged = free or total
        ranked.append(((judged.fits, judged.kv_cache_tokens), number))
        layers = stage.stage_layers or range(stage.shape.layer_count)
        summaries.append(
            StageEstimate(
                index=number,
                first_layer=layers.start,
                last_layer=layers.stop - 1,
                gpu=gpu,
                weights_bytes=stage.weights_bytes,
                kv_cache_bytes=total.kv_cache_bytes,
                kv_cache_tokens=total.kv_cache_tokens,
                fits=judged.fits,
                problem=judged.problem,
            )
        )
    return stages[min(ranked)[1]], summaries


def _encoder_layers_hidden(config: dict[str, Any]) -> tuple[int, int] | None:
    """The vision encoder's size as SGLang's ``adjust_mem_fraction_for_vlm`` reads it:
    ``num_hidden_layers`` (24 where the config names its depth otherwise, as Qwen-VL's ``depth``)
    and ``hidden_size`` (1024 where absent)."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    layers = vision.get("num_hidden_layers") or 24
    hidden = vision.get("hidden_size") or 1024
    return (int(layers), int(hidden))


def _sglang_prefill_graphs(config: dict[str, Any], shape: ModelShape, multimodal: bool) -> bool:
    """Whether SGLang 0.5.17 captures prefill CUDA graphs: not for MLA models, and for multimodal
    models only where their architecture is validated (``_disable_breakable_cudagraph_if_incompatible``)."""
    if shape.mla_latent_dim:
        return False
    if multimodal:
        architectures = set(config.get("architectures") or [])
        return bool(architectures & SGLANG_MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES)
    return True


def _plan(inputs: _Inputs, engine: str, basis: Basis, memory_bytes: int) -> MemoryPlan:
    total = inputs.gpu.memory_total_bytes
    fraction = inputs.fraction
    problem: str | None = None
    if engine == "vllm":
        budget = math.ceil(total * fraction)
        if basis == "free" and memory_bytes < budget:
            problem = (
                f"vLLM asks for {fraction} x {total / GIB:.1f} GiB = {budget / GIB:.1f} GiB but only "
                f"{memory_bytes / GIB:.1f} GiB is free now"
            )
        overhead = inputs.weights_bytes + inputs.activation_bytes + inputs.non_torch_bytes
        if inputs.graphs_in_budget:
            overhead += inputs.cuda_graph_bytes
        kv_bytes = inputs.arguments.kv_cache_memory_bytes or budget - overhead
    else:
        parallel_buffers = NON_TORCH_PARALLEL_EXTRA_BYTES if inputs.layout.gpus_needed > 1 else 0
        front_end = SGLANG_MULTIMODAL_PRELOAD_BYTES if inputs.encoder_loaded else 0
        free_before = (
            (total if basis == "total" else memory_bytes) - CUDA_CONTEXT_BYTES - parallel_buffers - front_end
        )
        budget = int(free_before * fraction)
        kv_bytes = budget - inputs.weights_bytes
    tokens, concurrency = kv_tokens_from_bytes(
        inputs.cache, kv_bytes, inputs.context_tokens, engine, prefix_caching=inputs.arguments.prefix_caching
    )
    if inputs.arguments.max_total_tokens:
        tokens = min(tokens, inputs.arguments.max_total_tokens)
    if problem is None and kv_bytes <= 0:
        problem = (
            f"weights ({inputs.weights_bytes / GIB:.1f} GiB per GPU) and overheads leave no memory for the "
            f"KV cache under {inputs.arguments.memory_knob} {fraction}"
        )
    elif problem is None and concurrency < 1:
        problem = (
            f"one sequence of {inputs.context_tokens:,} tokens needs "
            f"{_sequence_bytes(inputs, engine) / GIB:.2f} GiB of KV cache per GPU, "
            f"{max(kv_bytes, 0) / GIB:.2f} GiB is available ({tokens:,} tokens)"
        )
    return MemoryPlan(
        basis=basis,
        gpu_memory_bytes=memory_bytes,
        budget_bytes=budget,
        kv_cache_bytes=max(kv_bytes, 0),
        kv_cache_tokens=tokens,
        max_concurrency=round(concurrency, 2),
        fits=problem is None,
        problem=problem,
    )


def outside_budget_bytes(inputs: _Inputs, engine: str) -> int:
    """What must fit outside the knob's budget: the CUDA context and CUDA graphs (vLLM), plus
    activations for SGLang, whose fraction covers only weights and the KV pool."""
    needed = CUDA_CONTEXT_BYTES + (0 if inputs.graphs_in_budget else inputs.cuda_graph_bytes)
    if engine == "sglang":
        needed += inputs.activation_bytes
    return needed


def safe_memory_fraction(inputs: _Inputs, engine: str) -> float:
    """The highest knob value that leaves ``outside_budget_bytes`` free (at most 0.95)."""
    room = 1 - outside_budget_bytes(inputs, engine) / inputs.gpu.memory_total_bytes
    return max(0.0, min(SAFE_MAX_FRACTION[engine], math.floor(room * 100) / 100))


def _sequence_bytes(inputs: _Inputs, engine: str) -> int:
    return sequences_cache_bytes(
        inputs.cache, inputs.context_tokens, engine, prefix_caching=inputs.arguments.prefix_caching
    )


def _fraction_needed(inputs: _Inputs, engine: str, memory_bytes: int, sequences: float = 1.0) -> float:
    """The smallest memory fraction that holds ``sequences`` sequences of the context."""
    need = _sequence_bytes(inputs, engine) * sequences
    total = inputs.gpu.memory_total_bytes
    if engine == "vllm":
        overhead = inputs.weights_bytes + inputs.activation_bytes + inputs.non_torch_bytes
        if inputs.graphs_in_budget:
            overhead += inputs.cuda_graph_bytes
        need += VLLM_BLOCK_TOKENS * inputs.cache.kv_bytes_per_token
        return (overhead + need) / total
    free_before = memory_bytes - CUDA_CONTEXT_BYTES
    return (inputs.weights_bytes + need) / free_before


def _max_context(inputs: _Inputs, engine: str, fraction: float) -> int:
    """The longest context one sequence can have at ``fraction`` (binary search on the plan), up to
    the model's ``max_position_embeddings`` (or the requested context, if longer)."""
    low, high = 0, max(inputs.context_tokens, inputs.shape.max_position_embeddings or 0, 1)
    for _ in range(40):
        if low >= high:
            break
        middle = (low + high + 1) // 2
        probe = replace(inputs, fraction=fraction, context_tokens=middle)
        if _plan(probe, engine, "total", probe.gpu.memory_total_bytes).fits:
            low = middle
        else:
            high = middle - 1
    return low


def estimate_memory(
    model: ModelFacts,
    engine: str,
    gpus: list[GpuSpec],
    backend_parameters: Sequence[str] | ParsedParameters,
    *,
    engine_version: str | None = None,
    env: Mapping[str, str] | None = None,
) -> MemoryEstimate:
    """Estimate weights, KV cache and overheads per GPU of one replica, on an idle GPU (total
    memory) and, when the GPUs' free memory is known, on the GPUs as they are now.

    ``backend_parameters`` are lines as typed (each split by shell rules) or their parsed form."""
    inputs = _prepare(model, engine, gpus, backend_parameters, engine_version, env)
    stage_summaries: list[StageEstimate] = []
    if inputs.layout.pipeline_parallel > 1:
        inputs, stage_summaries = _limiting_stage(_stage_inputs(model, gpus, inputs), engine)
    gpu = inputs.gpu
    on_total = _plan(inputs, engine, "total", gpu.memory_total_bytes)
    on_free = (
        _plan(inputs, engine, "free", gpu.memory_free_bytes) if gpu.memory_free_bytes is not None else None
    )
    safe = safe_memory_fraction(inputs, engine)
    headroom_safe = safe
    reference_bytes = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else gpu.memory_total_bytes
    needed = _fraction_needed(inputs, engine, reference_bytes)
    if engine == "vllm" and gpu.memory_free_bytes is not None:
        safe = min(safe, gpu.memory_free_bytes / gpu.memory_total_bytes)
    recommended: float | None = None
    if needed <= safe:
        recommended = max(
            math.ceil(needed * 100) / 100, inputs.fraction if (on_free or on_total).fits else 0.0
        )
        recommended = min(recommended, safe)
        if engine == "vllm" and on_free is not None and not on_free.fits and gpu.memory_free_bytes:
            # A GPU others use: name the most vLLM may ask for and still start (the largest KV
            # cache), not the least that fits; the margin is for its CUDA context.
            usable = gpu.memory_free_bytes - BUSY_GPU_MARGIN_BYTES
            largest = math.floor(usable / gpu.memory_total_bytes * 100) / 100
            if largest >= needed:
                recommended = min(largest, safe)
    source = "safetensors headers" if inputs.parts.source == "headers" else "config.json (computed)"
    notes = [f"weights from {source}"]
    if inputs.cache.state_bytes_per_sequence:
        notes.append(
            f"hybrid linear attention: {inputs.shape.count('linear')} of {inputs.shape.layer_count} layers "
            f"keep a fixed state ({inputs.cache.state_bytes_per_sequence / (1 << 20):.1f} MiB per sequence "
            f"per GPU, {inputs.cache.state_dtype})"
        )
    if not known_kv_dtype(inputs.cache.kv_dtype):
        notes.append(
            f"KV-cache dtype {inputs.cache.kv_dtype!r} is not known to the estimator: counted as 2 bytes"
        )
    if stage_summaries:
        stage = stage_summaries[inputs.stage or 0]
        notes.append(
            f"pipeline parallel: {len(stage_summaries)} stages of "
            + "/".join(str(part.last_layer - part.first_layer + 1) for part in stage_summaries)
            + f" layers; stage {stage.index + 1} (layers {stage.first_layer}-{stage.last_layer}, "
            f"{stage.gpu.name}) has the fewest KV tokens, and the engine gives every stage as many"
        )
    if inputs.speculative is not None:
        notes.append(f"speculative decoding: {inputs.speculative.describe()}, counted in weights and KV")
    if inputs.encoder_loaded:
        notes.append("multimodal encoder loaded (turn it off with language-only flags to save memory)")
    return MemoryEstimate(
        engine=engine,
        gpu=gpu,
        gpu_count=inputs.layout.gpus_needed,
        tensor_parallel=inputs.layout.tensor_parallel,
        pipeline_parallel=inputs.layout.pipeline_parallel,
        context_tokens=inputs.context_tokens,
        memory_knob=inputs.arguments.memory_knob,
        memory_fraction=inputs.fraction,
        memory_fraction_is_default=inputs.fraction_is_default,
        weights_bytes=inputs.weights_bytes,
        weights_source=inputs.parts.source,
        cache=inputs.cache,
        activation_bytes=inputs.activation_bytes,
        cuda_graph_bytes=inputs.cuda_graph_bytes,
        non_torch_bytes=inputs.non_torch_bytes,
        encoder_loaded=inputs.encoder_loaded,
        plan_on_total=on_total,
        plan_on_free=on_free,
        recommended_memory_fraction=recommended,
        safe_memory_fraction=headroom_safe,
        max_context_tokens_at_safe_fraction=_max_context(inputs, engine, headroom_safe),
        notes=notes,
        stages=stage_summaries,
        limiting_stage=inputs.stage,
        prefix_caching=inputs.arguments.prefix_caching,
        speculative=inputs.speculative,
        cuda_graphs_in_budget=inputs.graphs_in_budget,
    )
