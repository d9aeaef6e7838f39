"""What speculative decoding adds to a GPU's memory: a draft model's weights and KV cache, or the
KV cache of the model's own MTP layers.

- A draft model (vLLM ``--speculative-config '{"model": PATH, ...}'`` with method ``eagle``,
  ``eagle3``, ``draft_model`` or none; SGLang ``--speculative-draft-model-path PATH``) is loaded
  beside the model, split over the same tensor-parallel ranks, and its attention layers keep KV
  for every token the model keeps: its weights are added to the model's, its bytes per token to
  the model's (vLLM pages the draft's layers in the same KV cache; SGLang gives the draft a pool of
  its own, as many tokens as the model's, out of the same fraction).
- MTP (vLLM ``"method": "mtp"``, SGLang ``EAGLE``/``NEXTN`` without a draft path) runs the
  model's own multi-token-prediction layers: their weights are the model's (``load_mtp``), and
  each keeps KV per token like one more attention layer.

The draft's config.json and weights are read through ``modeldir`` (its size cap and errors), from
the directory as the engine would see it on this host.

    draft = speculative_memory(arguments, shape, cache, tensor_parallel=1)
    draft.weights_bytes, draft.kv_bytes_per_token, draft.describe()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from modelyard.errors import InvalidInput, InvalidModelDirectory
from modelyard.estimate.architecture import ModelShape, read_model_shape
from modelyard.estimate.engine_arguments import EngineArguments
from modelyard.estimate.kv_cache import CacheShape, cache_shape, serving_dtype
from modelyard.estimate.weights import parts_from_config, parts_from_headers, weight_bytes_per_gpu
from modelyard.modeldir import read_model_facts

GIB = 1 << 30
SpeculativeKind = Literal["draft model", "MTP layers"]


@dataclass(frozen=True)
class SpeculativeMemory:
    """Per GPU: what the draft (or the MTP layers) adds to the model's weights and KV cache."""

    kind: SpeculativeKind
    # The draft's directory, or the model's own layers for MTP.
    source: str
    layers: int
    # Draft weights on one GPU (0 for MTP: its layers are counted in the model's weights).
    weights_bytes: int
    kv_bytes_per_token: int
    architecture: str | None = None

    def describe(self) -> str:
        """``draft model /models/eagle (1 layer, LlamaForCausalLMEagle3): 0.81 GiB of weights,
        4.0 KiB of KV per token`` as the CLI prints it."""
        what = f"{self.layers} layer{'s' if self.layers != 1 else ''}"
        if self.architecture:
            what += f", {self.architecture}"
        weights = f"{self.weights_bytes / GIB:.2f} GiB of weights, " if self.weights_bytes else ""
        kv = f"{self.kv_bytes_per_token / 1024:.1f} KiB of KV per token"
        return f"{self.kind} {self.source} ({what}): {weights}{kv}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def speculative_memory(
    arguments: EngineArguments,
    shape: ModelShape,
    cache: CacheShape,
    *,
    tensor_parallel: int,
    attention_tensor_parallel: int | None = None,
) -> SpeculativeMemory | None:
    """What the speculative decoding in ``arguments`` adds per GPU (None: none, or a method such
    as ngram that holds nothing on the GPU). ``InvalidInput`` when the draft's directory cannot be
    read, naming the flag."""
    if arguments.draft_model_path:
        return _draft_model(arguments, arguments.draft_model_path, tensor_parallel, attention_tensor_parallel)
    if arguments.speculative_mtp and shape.mtp_layer_count > 0:
        return SpeculativeMemory(
            kind="MTP layers",
            source="of the model",
            layers=shape.mtp_layer_count,
            weights_bytes=0,
            kv_bytes_per_token=shape.mtp_layer_count * cache.kv_bytes_per_token_per_layer,
        )
    return None


def with_speculative_cache(cache: CacheShape, speculative: SpeculativeMemory | None) -> CacheShape:
    """The model's cache shape with the draft's (or MTP layers') KV added: every token the model
    keeps, the draft keeps too."""
    if speculative is None or not speculative.kv_bytes_per_token:
        return cache
    return replace(
        cache,
        kv_bytes_per_token=cache.kv_bytes_per_token + speculative.kv_bytes_per_token,
        attention_layer_count=cache.attention_layer_count + speculative.layers,
    )


def _draft_model(
    arguments: EngineArguments, path_text: str, tensor_parallel: int, attention_tensor_parallel: int | None
) -> SpeculativeMemory:
    flag = "--speculative-config's model" if arguments.engine == "vllm" else "--speculative-draft-model-path"
    try:
        facts = read_model_facts(Path(path_text))
    except InvalidModelDirectory as error:
        raise InvalidInput(
            f"the draft model of {flag} ({path_text}) cannot be read: {error.message}",
            hint="give the draft's directory as this host sees it (config.json and weights), "
            "or estimate without speculative decoding",
        ) from error
    shape = read_model_shape(facts.config)
    if shape.layer_count == 0 or shape.hidden_size == 0:
        raise InvalidInput(
            f"the draft model's config.json ({facts.directory}) has no num_hidden_layers/hidden_size",
            hint="give the draft's own directory (an EAGLE head or a small model of the same family)",
        )
    if facts.weights is not None and facts.weights.total_bytes > 0:
        parts = parts_from_headers(facts.weights, shape)
    else:
        parts = parts_from_config(
            shape, serving_dtype(facts.dtype, arguments.dtype), facts.quantization_config
        )
    weights = weight_bytes_per_gpu(
        parts,
        shape.layer_count,
        tensor_parallel,
        1,
        load_encoder=False,
        load_mtp=False,
        attention_tensor_parallel=attention_tensor_parallel,
        engine=arguments.engine,
    )
    draft_cache = cache_shape(
        shape,
        facts.model_type,
        facts.dtype,
        facts.quantization_config,
        replace(arguments, pipeline_parallel=1, speculative_tokens=0),
        attention_tensor_parallel=attention_tensor_parallel or tensor_parallel,
    )
    architectures = facts.config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    return SpeculativeMemory(
        kind="draft model",
        source=str(facts.directory),
        layers=shape.layer_count,
        weights_bytes=weights,
        kv_bytes_per_token=draft_cache.kv_bytes_per_token + draft_cache.sliding_bytes_per_token,
        architecture=architecture if isinstance(architecture, str) else None,
    )
