"""KV-cache tokens from KV-cache bytes, counted as each engine logs them.

vLLM pages the cache in 16-token blocks (hybrid linear-attention models in blocks as large as one
layer's recurrent state); SGLang counts the full-attention tokens of its KV pool after the
recurrent-state pool took its share.

Usage::

    tokens, concurrency = kv_tokens_from_bytes(cache, 40 << 30, 32768, "vllm")
"""

from __future__ import annotations

import math

from modelyard.estimate.kv_cache import CacheShape

# SGLang gives hybrid models' recurrent-state pool 0.9 of the KV pool's size (0.9/1.9 of the memory).
SGLANG_MAMBA_MEMORY_RATIO = 0.9
# vLLM's KV block size (tokens); SGLang's default page size is 1.
VLLM_BLOCK_TOKENS = 16


def _vllm_group_size(first_kind_layers: int, second_kind_layers: int) -> int:
    """Layers per KV-cache group when two kinds of layers share one page size (vLLM's
    ``_get_kv_cache_groups_uniform_page_size``): the smaller count, or the larger when it is
    less than 1.5 times the smaller (less padding); one kind alone is one group."""
    if not first_kind_layers or not second_kind_layers:
        return max(first_kind_layers, second_kind_layers, 1)
    group_size = min(first_kind_layers, second_kind_layers)
    if max(first_kind_layers, second_kind_layers) < 1.5 * group_size:
        group_size = max(first_kind_layers, second_kind_layers)
    return group_size


def _vllm_sliding_tokens(cache: CacheShape, kv_cache_bytes: int, context_tokens: int) -> tuple[int, float]:
    """vLLM's logged tokens for a model with sliding-window layers: max concurrency x context,
    where a sequence needs its context's blocks in each full-attention group and, in each
    sliding group, the blocks of ``sliding_admission_tokens`` plus one (the window need not start
    at a block's edge); every block id holds one page per layer of a group."""
    full, sliding = cache.attention_layer_count, cache.sliding_layer_count
    per_layer = cache.kv_bytes_per_token_per_layer
    if not sliding or not per_layer:
        per_sequence = cache.sequence_bytes(context_tokens)
        concurrency = kv_cache_bytes / per_sequence if per_sequence else 0.0
        return int(concurrency * context_tokens), concurrency
    group_size = _vllm_group_size(full, sliding)
    window = cache.sliding_admission_tokens or cache.sliding_window_tokens or context_tokens
    window = min(context_tokens, window)
    blocks_per_sequence = math.ceil(full / group_size) * math.ceil(context_tokens / VLLM_BLOCK_TOKENS)
    blocks_per_sequence += math.ceil(sliding / group_size) * (math.ceil(window / VLLM_BLOCK_TOKENS) + 1)
    blocks = kv_cache_bytes // (VLLM_BLOCK_TOKENS * per_layer * group_size)
    concurrency = blocks / blocks_per_sequence
    return int(concurrency * context_tokens), concurrency


def _vllm_hybrid_pages(cache: CacheShape) -> tuple[int, int, int, int, int]:
    """How vLLM pages a hybrid model (``block_tokens``, ``page_bytes``, ``group_size``,
    ``attention_groups``, ``state_groups``): one page size for every layer, so attention blocks
    grow (in steps of 16 tokens) until a layer's block is as large as one layer's recurrent state;
    layers form groups of ``group_size``, each group one page per block."""
    attention_layers, linear_layers = cache.attention_layer_count, cache.linear_layer_count
    per_token_layer = cache.kv_bytes_per_token_per_layer
    block_tokens = max(VLLM_BLOCK_TOKENS, math.ceil(cache.state_bytes_per_layer / per_token_layer / 16) * 16)
    page_bytes = block_tokens * per_token_layer
    group_size = _vllm_group_size(attention_layers, linear_layers)
    return (
        block_tokens,
        page_bytes,
        group_size,
        math.ceil(attention_layers / group_size),
        math.ceil(linear_layers / group_size),
    )


def _vllm_hybrid_blocks_per_sequence(cache: CacheShape, context_tokens: int, state_blocks: int) -> int:
    block_tokens, _, _, attention_groups, state_groups = _vllm_hybrid_pages(cache)
    return attention_groups * math.ceil(context_tokens / block_tokens) + state_groups * state_blocks


def _vllm_hybrid_tokens(
    cache: CacheShape, kv_cache_bytes: int, context_tokens: int, state_blocks_per_sequence: int
) -> tuple[int, float]:
    """Each sequence of a hybrid model needs its context's attention blocks plus
    ``state_blocks_per_sequence`` blocks per state group (``_vllm_hybrid_pages``)."""
    if not cache.attention_layer_count or not cache.kv_bytes_per_token_per_layer:
        concurrency = kv_cache_bytes / max(cache.state_bytes_per_sequence, 1)
        return int(concurrency * context_tokens), concurrency
    _, page_bytes, group_size, _, _ = _vllm_hybrid_pages(cache)
    blocks = kv_cache_bytes // (page_bytes * group_size)
    concurrency = blocks / _vllm_hybrid_blocks_per_sequence(cache, context_tokens, state_blocks_per_sequence)
    return int(concurrency * context_tokens), concurrency


def sequences_cache_bytes(
    cache: CacheShape,
    context_tokens: int,
    engine: str,
    sequences: int = 1,
    *,
    prefix_caching: bool | None = None,
) -> int:
    """The cache bytes ``sequences`` sequences of ``context_tokens`` need on one GPU, as the engine
    pages them: vLLM in whole blocks, a hybrid model's state in aligned pages, two state blocks a
    sequence with prefix caching (one without), so the state is counted per sequence of
    ``--max-num-seqs``; SGLang (page size 1) by the bytes, a hybrid model's pool large enough that
    its KV part (1 / 1.9) holds the tokens and its state part (0.9 / 1.9) the states.

    ``prefix_caching`` None is the engine's default: vLLM 0.25 turns it off for hybrid models
    (``ModelConfig.is_prefix_caching_supported``), so their state takes one block a sequence."""
    if engine != "vllm":
        if cache.state_bytes_per_sequence:
            # SGLang splits the pool 1 : 0.9 between KV tokens and states: both must fit their part.
            kv = (cache.kv_bytes_per_token + cache.sliding_bytes_per_token) * context_tokens * sequences
            states = cache.state_bytes_per_sequence * sequences
            ratio = SGLANG_MAMBA_MEMORY_RATIO
            return math.ceil(max(kv * (1 + ratio), states * (1 + ratio) / ratio))
        return cache.sequence_bytes(context_tokens) * sequences
    if cache.state_bytes_per_sequence and cache.attention_layer_count and cache.kv_bytes_per_token_per_layer:
        _, page_bytes, group_size, _, _ = _vllm_hybrid_pages(cache)
        state_blocks = (2 if prefix_caching else 1) + cache.speculative_state_blocks
        blocks = _vllm_hybrid_blocks_per_sequence(cache, context_tokens, state_blocks)
        return blocks * page_bytes * group_size * sequences
    if cache.state_bytes_per_sequence:
        return cache.state_bytes_per_sequence * sequences
    whole_blocks = math.ceil(context_tokens / VLLM_BLOCK_TOKENS) * VLLM_BLOCK_TOKENS
    return cache.sequence_bytes(whole_blocks) * sequences


def kv_tokens_from_bytes(
    cache: CacheShape,
    kv_cache_bytes: int,
    context_tokens: int,
    engine: str,
    *,
    prefix_caching: bool | None = None,
) -> tuple[int, float]:
    """KV tokens and max concurrency at ``context_tokens`` that ``kv_cache_bytes`` hold on one GPU.

    Tokens are counted as the engines log them: vLLM's "GPU KV cache size" (whole 16-token
    blocks; for models with per-sequence state, concurrency x context), SGLang's
    ``max_total_num_tokens`` (full-attention tokens of the KV pool, after the recurrent-state
    pool took its share).
    """
    if kv_cache_bytes <= 0:
        return 0, 0.0
    if engine == "sglang":
        pool = kv_cache_bytes
        if cache.state_bytes_per_sequence:
            pool = int(kv_cache_bytes / (1 + SGLANG_MAMBA_MEMORY_RATIO))
        per_token = cache.kv_bytes_per_token + cache.sliding_bytes_per_token
        tokens = pool // per_token if per_token else 0
        return int(tokens), tokens / context_tokens if context_tokens else 0.0
    if cache.state_bytes_per_sequence:
        state_blocks = (2 if prefix_caching else 1) + cache.speculative_state_blocks
        return _vllm_hybrid_tokens(cache, kv_cache_bytes, context_tokens, state_blocks)
    if cache.sliding_bytes_per_token:
        return _vllm_sliding_tokens(cache, kv_cache_bytes, context_tokens)
    blocks = kv_cache_bytes // (cache.kv_bytes_per_token * VLLM_BLOCK_TOKENS)
    tokens = int(blocks * VLLM_BLOCK_TOKENS)
    return tokens, tokens / context_tokens if context_tokens else 0.0
