"""Parallel layouts over several nodes: what each node gets, and a tensor-parallel group that spans nodes.

``layout.check_layout`` counts the GPUs one node gives a replica against the layout's share of
that node. Over several nodes two more rules hold:

- ``--nnodes N`` splits the world (TP x PP, and DP where it adds ranks) into N equal parts, one per
  node: SGLang places ``tp_size * pp_size / nnodes`` ranks on each node (its scheduler's
  ``tp_size_per_node = tp_size // nnodes``) and vLLM's multi-node ``mp`` executor
  ``world_size / nnodes``; a world that does not divide leaves ranks that no node starts, and the
  others wait for them in NCCL initialisation (or the engine refuses the layout). ``param.layout-over-nodes``,
  an error.
- A tensor-parallel group larger than the GPUs of one node (Ray, or ``--nnodes``) runs its
  all-reduce, twice per layer, over the network between nodes. The engine starts and serves, many
  times slower than TP within a node and PP across nodes (vLLM's distributed serving guide: "the
  tensor parallel size [is] the number of GPUs in each node, and the pipeline parallel size [is]
  the number of nodes"). ``param.tensor-parallel-across-nodes``, a warning.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.layout import LAYOUT_ENGINES, context_layout


def check_nodes(context: ParameterContext) -> list[Finding]:
    if context.engine not in LAYOUT_ENGINES:
        return []
    layout = context_layout(context)
    findings: list[Finding] = []
    world = layout.world_size
    if layout.nodes > 1 and world % layout.nodes:
        findings.append(
            Finding(
                "param.layout-over-nodes",
                Severity.ERROR,
                f"{layout.describe()} is {world} ranks, which do not split evenly over --nnodes "
                f"{layout.nodes}; {context.label} starts world // nodes ranks on each node, so some ranks "
                "never start and the start hangs in collective initialisation or fails",
                fix=f"make the ranks a multiple of {layout.nodes} (e.g. TP = the GPUs of one node, "
                f"PP = {layout.nodes})",
                details={"ranks": world, "nodes": layout.nodes},
            )
        )
    per_node = context.gpu_count
    spans = layout.nodes > 1 or layout.ray_backend or layout.spans_nodes
    if spans and per_node and layout.tensor_parallel > per_node and world > per_node:
        nodes = -(-layout.tensor_parallel // per_node)
        findings.append(
            Finding(
                "param.tensor-parallel-across-nodes",
                Severity.WARNING,
                f"{layout.flag('tensor')} {layout.tensor_parallel} is more than the {per_node} GPUs of one "
                f"node: the tensor-parallel group spans {nodes} nodes and its all-reduce (twice per layer) "
                "goes over the network; it starts, but decodes many times slower",
                fix=f"use tensor parallel {per_node} (the GPUs of a node) and pipeline parallel across the "
                f"nodes ({layout.flag('pipeline')} {nodes})",
                details={"tensor_parallel_size": layout.tensor_parallel, "gpus_per_node": per_node},
            )
        )
    return findings
