"""SGLang's CUDA graphs against what ``--mem-fraction-static`` leaves outside the static pool.

SGLang sizes its static pool (weights and KV cache) to ``--mem-fraction-static`` of the GPU first
(``model_runner.init_memory_pool``), then captures the decode CUDA graphs
(``cuda_graph_runner.CudaGraphRunner``) in what is left. When the rest cannot hold the CUDA
context and the graphs, the capture runs out of memory and the start stops ("Capture cuda graph
failed: CUDA out of memory ... set --mem-fraction-static to a smaller value"). That is an error
(``memory.fraction-leaves-no-headroom``), decided on the two parts the engine needs whatever the
load: the CUDA context and SGLang's own reserve per graph (2 MiB per decode batch size, 8 MiB per
prefill graph size, as its default fraction counts them; ``estimate.overheads``). A fraction that
leaves room for those but not for the activations of a full prefill chunk starts and may run out
under load: the estimator's warning of the same id.

Usage::

    graph_headroom_findings(estimate, cuda_graphs=not parsed.switch("--disable-cuda-graph"))
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.estimate.estimate_result import MemoryEstimate
from modelyard.estimate.overheads import CUDA_CONTEXT_BYTES

GIB = 1 << 30


def graph_headroom_findings(estimate: MemoryEstimate, *, cuda_graphs: bool) -> list[Finding]:
    if estimate.engine != "sglang" or not cuda_graphs or estimate.cuda_graph_bytes <= 0:
        return []
    total = estimate.gpu.memory_total_bytes
    outside = int(total * (1 - estimate.memory_fraction))
    needed = CUDA_CONTEXT_BYTES + estimate.cuda_graph_bytes
    if outside >= needed:
        return []
    safe = max(0.0, int((1 - needed / total) * 100) / 100)
    return [
        Finding(
            "memory.fraction-leaves-no-headroom",
            Severity.ERROR,
            f"{estimate.memory_knob} {estimate.memory_fraction} leaves {outside / GIB:.2f} GiB of "
            f"{estimate.gpu.name} outside the static pool, less than the CUDA context and the CUDA graphs "
            f"SGLang captures after sizing it ({needed / GIB:.2f} GiB): the start stops with "
            '"Capture cuda graph failed: CUDA out of memory"',
            fix=f"lower {estimate.memory_knob} to {safe:.2f} or less (or leave it to SGLang's default), "
            "lower --cuda-graph-max-bs, or add --disable-cuda-graph (slower decoding)",
            details={"outside_budget_bytes": outside, "needed_bytes": needed},
        )
    ]
