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


def _vllm_hybrid_tokens(
    cache: CacheShape, kv_cache_bytes: int, context_tokens: int, state_blocks_per_sequence: int
) -> tuple[int, float]:
    """vLLM pages hybrid models with one page size: attention blocks grow until a layer's block is
    as large as one layer's recurrent state; layers form groups of equal size; each sequence needs
    its context's attention blocks plus ``state_blocks_per_sequence`` blocks per state group."""
    attention_layers, linear_layers = cache.attention_layer_count, cache.linear_layer_count
    per_token_layer = cache.kv_bytes_per_token_per_layer
    if not attention_layers or not per_token_layer:
        concurrency = kv_cache_bytes / max(cache.state_bytes_per_sequence, 1)
        return int(concurrency * context_tokens), concurrency
    block_tokens = max(VLLM_BLOCK_TOKENS, math.ceil(cache.state_bytes_per_layer / per_token_layer / 16) * 16)
    page_bytes = block_tokens * per_token_layer
    group_size = min(attention_layers, linear_layers)
    if max(attention_layers, linear_layers) < 1.5 * group_size:
        group_size = max(attention_layers, linear_layers)
    attention_groups = math.ceil(attention_layers / group_size)
    state_groups = math.ceil(linear_layers / group_size)
    blocks = kv_cache_bytes // (page_bytes * group_size)
    per_sequence = attention_groups * math.ceil(context_tokens / block_tokens)
    per_sequence += state_groups * state_blocks_per_sequence
    concurrency = blocks / per_sequence
    return int(concurrency * context_tokens), concurrency


def kv_tokens_from_bytes(
    cache: CacheShape, kv_cache_bytes: int, context_tokens: int, engine: str, *, prefix_caching: bool = True
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
        return _vllm_hybrid_tokens(cache, kv_cache_bytes, context_tokens, 2 if prefix_caching else 1)
    per_sequence = cache.sequence_bytes(context_tokens)
    concurrency = kv_cache_bytes / per_sequence if per_sequence else 0.0
    if cache.sliding_bytes_per_token:
        return int(concurrency * context_tokens), concurrency
    blocks = kv_cache_bytes // (cache.kv_bytes_per_token * VLLM_BLOCK_TOKENS)
    tokens = int(blocks * VLLM_BLOCK_TOKENS)
    return tokens, tokens / context_tokens if context_tokens else 0.0
