"""How each engine version divides a GPU's memory: the knob's default, what it counts, what it leaves out.

vLLM's ``--gpu-memory-utilization`` is a fraction of TOTAL memory. What it covers changed:

- before 0.6.4 (the V0 engine) and in the V1 engine before 0.8, the fraction covered the memory of
  EVERY process on the GPU: a second engine at 0.2 next to a first at 0.2 had nothing left
  ("No available memory for the cache blocks", vllm-project/vllm#14376, #4242); since, it is the
  engine's own share;
- CUDA graphs are captured after the KV cache is sized, in the memory the fraction leaves out
  ("CUDA graphs can take additional 1~3 GiB memory per GPU", vLLM's own log line). From 0.18 the
  engine measures them and logs them ("Estimated CUDA graph memory: 0.84 GiB total", "Actual usage
  is ... and 1.0 GiB for CUDAGraph memory"), but counts them in its budget only with
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``: vLLM 0.19.0 says so in its log ("In v0.19, CUDA
  graph memory profiling will be enabled by default ... To try it now, set ..."), and our own
  vLLM 0.25.0 run on an H200 sized its KV cache without them (budget - weights - activations -
  non-torch = "Available KV cache memory"); no release we have a log of turned it on by default;
- the default was 0.9, and 0.92 from 0.25.

SGLang's ``--mem-fraction-static`` covers weights and the KV pool only, of the memory free at start
(``overheads.sglang_default_memory_fraction`` computes its default).

Usage::

    vllm_default_utilization("0.19.1")           # 0.9
    vllm_knob_counts_other_processes("0.7.3", {"VLLM_USE_V1": "1"})   # True
    vllm_outside_reserve_bytes("0.25.0", enforce_eager=False)          # 1 GiB: graphs outside
    vllm_graphs_in_budget("0.25.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"})   # True
"""

from __future__ import annotations

from collections.abc import Mapping

from modelyard.estimate.versions import version_before

GIB = 1 << 30
# What CUDA graphs take outside the budget: the low end of vLLM's "1~3 GiB".
VLLM_OUTSIDE_GRAPH_BYTES = GIB
# What must stay outside the budget when graphs are inside it (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)
# or off (eager): the allocator's slack. The budget itself is measured as used memory, CUDA context
# included.
VLLM_OUTSIDE_SLACK_BYTES = GIB // 2
GRAPH_ESTIMATE_VARIABLE = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
VLLM_GRAPH_ESTIMATE_SINCE = "0.18.0"
VLLM_OWN_SHARE_SINCE = "0.6.4"
VLLM_V1_OWN_SHARE_SINCE = "0.8.0"
VLLM_092_DEFAULT_SINCE = "0.25.0"


def vllm_default_utilization(version: str | None) -> float:
    return 0.9 if version_before(version, VLLM_092_DEFAULT_SINCE) else 0.92


def vllm_knob_counts_other_processes(version: str | None, env: Mapping[str, str] | None = None) -> bool:
    """Whether this version's utilization covers other processes' memory on the GPU too."""
    if version_before(version, VLLM_OWN_SHARE_SINCE):
        return True
    v1 = (env or {}).get("VLLM_USE_V1", "").strip() == "1"
    return bool(v1 and version_before(version, VLLM_V1_OWN_SHARE_SINCE))


def vllm_graphs_in_budget(version: str | None, env: Mapping[str, str] | None = None) -> bool:
    """Whether the engine subtracts its CUDA graphs from the KV budget (the variable, from 0.18)."""
    if version_before(version, VLLM_GRAPH_ESTIMATE_SINCE):
        return False
    return (env or {}).get(GRAPH_ESTIMATE_VARIABLE, "").strip() == "1"


def vllm_outside_reserve_bytes(
    version: str | None,
    *,
    enforce_eager: bool,
    env: Mapping[str, str] | None = None,
    graphs_in_budget: bool | None = None,
) -> int:
    """Memory a start needs outside ``total x utilization`` to get through CUDA graph capture.
    ``graphs_in_budget``: whether this model's start takes its graphs from the budget, where the
    model is known (``graph_budget.vllm_graphs_counted``); None: from the version and env alone."""
    inside = vllm_graphs_in_budget(version, env) if graphs_in_budget is None else graphs_in_budget
    if inside or enforce_eager:
        return VLLM_OUTSIDE_SLACK_BYTES
    return VLLM_OUTSIDE_GRAPH_BYTES
