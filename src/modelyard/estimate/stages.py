"""One pipeline stage's share of a replica, as ``MemoryEstimate.stages`` lists them.

vLLM places layers on stages with ``get_pp_indices`` (or ``VLLM_PP_LAYER_PARTITION``); each stage
profiles its own GPU, sizes its own KV cache for its own layers, checks on its own that one
sequence of ``--max-model-len`` fits, and then every stage is cut to the smallest stage's block
count (``get_kv_cache_configs``: ``min_num_blocks``). So the stage with the fewest tokens decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelyard.estimate.gpus import GpuSpec


@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage's GPU: the layers it holds (``first_layer`` to ``last_layer``), its
    weights and its KV cache on an idle GPU. vLLM sizes every stage's cache to the smallest
    stage's block count (``get_kv_cache_configs``: ``min_num_blocks``), and each stage checks on
    its own that one sequence of ``--max-model-len`` fits its layers."""

    index: int
    first_layer: int
    last_layer: int
    gpu: GpuSpec
    weights_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    fits: bool
    problem: str | None = None
