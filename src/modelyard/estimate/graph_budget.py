"""vLLM's CUDA graphs: how much memory they take, and whether the engine takes it out of the KV cache.

Read from the released wheels' code (``vllm/envs.py``, ``vllm/config/vllm.py``,
``vllm/v1/worker/gpu_worker.py: determine_available_memory``, ``gpu_model_runner.py`` and
``gpu/model_runner.py: profile_cudagraph_memory``) of 0.19.0 and 0.20.0, 0.22.0 to 0.30.0:

- ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` came in 0.18 (off) and is on by default from 0.21
  (0.20.0 already reads "1"; the start log says "default since v0.21.0"). When it is on, the
  worker subtracts the model runner's CUDA-graph estimate from the KV budget.
- The V1 model runner measures the graphs; the V2 runner (``gpu/model_runner.py``) answered 0
  until 0.29, so a start on the V2 runner kept its graphs outside the budget up to 0.28.
- Which runner a start gets (``VllmConfig.use_v2_model_runner``, unless ``VLLM_USE_V2_MODEL_RUNNER``
  says): 0.21-0.22 V2 only for ``Qwen3ForCausalLM``, 0.23 also Llama and Mistral, neither MoE nor
  quantized; 0.24 the architectures of a list; 0.25-0.28 every model that is not hybrid (linear
  attention / Mamba), plus the MoE architectures of a list; 0.29 on, V2 nearly always, and it
  measures its graphs too.
- The graphs: ``cudagraph_capture_sizes`` default to ``[1, 2, 4] + range(8, 256, 8) + range(256,
  max + 1, 16)`` with ``max = min(max_num_seqs x (1 + num_speculative_tokens) x 2, 512,
  max_num_batched_tokens)``: 51 sizes at vLLM's default, 2 for one sequence. Each size is one graph
  (per mode); their memory grows with the count.

Usage::

    vllm_cuda_graphs_in_budget("0.24.0", {}, uses_v2_runner=False)   # True
    vllm_uses_v2_runner("0.25.0", ["Qwen3ForCausalLM"], moe=False, quantized=False, hybrid=False)   # True
    vllm_capture_size_count(max_sequences=1, speculative_tokens=0, batched_tokens=8192)   # 2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelyard.estimate.versions import version_before

GRAPH_ESTIMATE_VARIABLE = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
V2_RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
# The variable's default turned on in this release (0.20.0's envs.py already defaults to "1").
GRAPH_ESTIMATE_DEFAULT_ON_SINCE = "0.20.0"
GRAPH_ESTIMATE_SINCE = "0.18.0"
# The V2 model runner is the default for some models from here, and measures its graphs from 0.29.
V2_RUNNER_DEFAULT_SINCE = "0.21.0"
V2_RUNNER_MEASURES_GRAPHS_SINCE = "0.29.0"
# The capture sizes at vLLM's default (max 512): [1, 2, 4], 8..248 by 8, 256..512 by 16.
DEFAULT_CAPTURE_SIZE_COUNT = 51

# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of each release (config/vllm.py).
_V2_ARCHITECTURES: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "0.28.0",
        frozenset(
            {
                "DeepseekV2ForCausalLM",
                "DeepseekV4ForCausalLM",
                "GraniteMoeForCausalLM",
                "KimiK3ForConditionalGeneration",
                "Qwen2MoeForCausalLM",
            }
        ),
    ),
    (
        "0.27.0",
        frozenset(
            {
                "DeepseekV2ForCausalLM",
                "GraniteMoeForCausalLM",
                "KimiK3ForConditionalGeneration",
                "Qwen2MoeForCausalLM",
            }
        ),
    ),
    ("0.25.0", frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})),
    (
        "0.24.0",
        frozenset(
            {
                "Qwen3ForCausalLM",
                "DeepseekV2ForCausalLM",
                "Qwen2MoeForCausalLM",
                "GraniteMoeForCausalLM",
                "LlamaForCausalLM",
                "MistralForCausalLM",
            }
        ),
    ),
    ("0.23.0", frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})),
    ("0.21.0", frozenset({"Qwen3ForCausalLM"})),
)


def _switch(env: Mapping[str, str] | None, name: str) -> bool | None:
    value = (env or {}).get(name, "").strip().lower()
    if value in {"1", "true"}:
        return True
    if value in {"0", "false"}:
        return False
    return None


def vllm_uses_v2_runner(
    version: str | None,
    architectures: Sequence[str],
    *,
    moe: bool,
    quantized: bool,
    hybrid: bool,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Whether this start runs on vLLM's V2 model runner (an unknown version: the newest rules)."""
    forced = _switch(env, V2_RUNNER_VARIABLE)
    if forced is not None:
        return forced
    if version_before(version, V2_RUNNER_DEFAULT_SINCE):
        return False
    if not version_before(version, V2_RUNNER_MEASURES_GRAPHS_SINCE):
        return True
    listed = next(
        (names for since, names in _V2_ARCHITECTURES if not version_before(version, since)), frozenset()
    )
    named = any(architecture in listed for architecture in architectures)
    if version_before(version, "0.24.0"):
        return named and not moe and not quantized and not hybrid
    if version_before(version, "0.25.0"):
        return named
    return not hybrid and (named or not moe)


def vllm_cuda_graphs_in_budget(
    version: str | None, env: Mapping[str, str] | None, *, uses_v2_runner: bool
) -> bool:
    """Whether the start subtracts its CUDA graphs from the KV budget (an unknown version: the
    newest rules, where it does)."""
    if version_before(version, GRAPH_ESTIMATE_SINCE):
        return False
    switch = _switch(env, GRAPH_ESTIMATE_VARIABLE)
    enabled = switch if switch is not None else not version_before(version, GRAPH_ESTIMATE_DEFAULT_ON_SINCE)
    if not enabled:
        return False
    return not uses_v2_runner or not version_before(version, V2_RUNNER_MEASURES_GRAPHS_SINCE)


def vllm_capture_size_count(*, max_sequences: int, speculative_tokens: int, batched_tokens: int) -> int:
    """How many batch sizes vLLM captures a CUDA graph for by default (``_set_cudagraph_sizes``)."""
    largest = min(max_sequences * (1 + speculative_tokens) * 2, 512, batched_tokens)
    sizes = {size for size in (1, 2, 4) if size <= largest}
    sizes.update(range(8, min(largest + 1, 256), 8))
    sizes.update(range(256, largest + 1, 16))
    if batched_tokens <= largest:
        sizes.add(batched_tokens)
    return max(len(sizes), 1)


def vllm_graphs_counted(
    version: str | None,
    env: Mapping[str, str] | None,
    architectures: Sequence[str],
    *,
    moe: bool,
    quantized: bool,
    hybrid: bool,
) -> bool:
    """Whether this model's start takes its CUDA graphs from the KV budget (its runner, its release)."""
    runner_v2 = vllm_uses_v2_runner(
        version, architectures, moe=moe, quantized=quantized, hybrid=hybrid, env=env
    )
    return vllm_cuda_graphs_in_budget(version, env, uses_v2_runner=runner_v2)


def vllm_graph_bytes(
    default_sizes_bytes: int, max_sequences: int, speculative_tokens: int, batched_tokens: int
) -> int:
    """The graphs' memory: ``default_sizes_bytes`` at vLLM's default 51 capture sizes, less in
    proportion where fewer sizes are captured (a small ``--max-num-seqs``)."""
    captured = vllm_capture_size_count(
        max_sequences=max_sequences, speculative_tokens=speculative_tokens, batched_tokens=batched_tokens
    )
    return default_sizes_bytes * min(captured, DEFAULT_CAPTURE_SIZE_COUNT) // DEFAULT_CAPTURE_SIZE_COUNT
