"""The parallel layout a deployment's flags ask for: how many GPUs, and what each one holds.

Each engine spells and combines the parallel sizes its own way:

- vLLM: ``--tensor-parallel-size`` (TP) x ``--pipeline-parallel-size`` (PP) x
  ``--data-parallel-size`` (DP) ranks, of which ``--data-parallel-size-local`` run on this node.
  With DP > 1 the MoE layers run over TP x DP ranks (``--enable-expert-parallel`` splits whole
  experts across them instead of slicing every expert); attention and dense layers are replicated
  per DP rank. ``VLLM_PP_LAYER_PARTITION`` (``"20,20,24"``) places layers on stages explicitly.
- SGLang: ``--tp-size`` x ``--pp-size``; ``--dp-size`` adds DP replicas of TP x PP GPUs each,
  except with DP attention (``--enable-dp-attention``, or ``--attn-dp-size`` from 0.5.23), where
  the DP groups share the TP GPUs and attention runs with TP / DP ranks; ``--ep-size`` splits the
  experts over that many of the TP ranks.

Usage::

    layout = read_layout("vllm", parsed, env={"VLLM_PP_LAYER_PARTITION": "24,24"})
    layout.gpus_needed, layout.attention_tensor_parallel, layout.moe_ranks
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from modelyard.backends.parameters import ParsedParameters
from modelyard.errors import InvalidInput

PP_PARTITION_VARIABLE = "VLLM_PP_LAYER_PARTITION"
# SGLang's get_pp_indices reads its own variable, with the same format.
SGLANG_PP_PARTITION_VARIABLE = "SGLANG_PP_LAYER_PARTITION"


@dataclass(frozen=True)
class Layout:
    """The parallel sizes of one replica (``None`` where the flags leave the engine's default)."""

    engine: str
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    # vLLM ``--data-parallel-size-local``: the DP ranks on this node (multi-node DP).
    data_parallel_local: int | None = None
    # vLLM ``--enable-expert-parallel``; SGLang ``--ep-size`` above 1.
    expert_parallel: bool = False
    # SGLang's ``--ep-size`` (vLLM's EP size is always the MoE ranks).
    expert_parallel_size: int = 1
    # SGLang DP attention: the DP groups share the TP GPUs.
    data_parallel_attention: bool = False
    nodes: int = 1
    # vLLM ``--headless`` / ``--distributed-executor-backend ray``: ranks live on other nodes too.
    spans_nodes: bool = False
    ray_backend: bool = False
    # Layers per pipeline stage from ``VLLM_PP_LAYER_PARTITION``, when set.
    stage_layers: tuple[int, ...] | None = None
    # Where each size came from, for messages: "--tp 2", "--data-parallel-size 4".
    spelled: tuple[tuple[str, str], ...] = ()

    @property
    def world_size(self) -> int:
        """Ranks of the whole replica, over every node."""
        if self.engine == "sglang" and self.data_parallel_attention:
            return self.tensor_parallel * self.pipeline_parallel
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def gpus_needed(self) -> int:
        """GPUs this node gives the replica: the world size, or this node's share of it."""
        if self.engine == "vllm" and self.data_parallel_local is not None:
            return self.tensor_parallel * self.pipeline_parallel * self.data_parallel_local
        if self.nodes > 1:
            return max(1, self.world_size // self.nodes)
        return self.world_size

    @property
    def multi_node(self) -> bool:
        return (
            self.nodes > 1
            or self.spans_nodes
            or (self.data_parallel_local is not None and self.data_parallel_local < self.data_parallel)
        )

    @property
    def attention_tensor_parallel(self) -> int:
        """The ranks one attention layer is split over (TP, or TP / DP with SGLang DP attention)."""
        if self.engine == "sglang" and self.data_parallel_attention and self.data_parallel > 1:
            return max(1, self.tensor_parallel // self.data_parallel)
        return self.tensor_parallel

    @property
    def replicates_embeddings(self) -> bool:
        """SGLang's DP attention builds the input embeddings whole on every GPU
        (``VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())``)."""
        return self.engine == "sglang" and self.data_parallel_attention and self.data_parallel > 1

    def stage_gpu_indices(self, stage: int) -> list[int]:
        """Which of the replica's GPUs (in the order given) run pipeline stage ``stage``: ranks are
        numbered DP rank, then PP stage, then TP rank (vLLM's and SGLang's rank order)."""
        per_replica = self.tensor_parallel * self.pipeline_parallel
        replicas = max(1, self.gpus_needed // per_replica)
        return [
            replica * per_replica + stage * self.tensor_parallel + rank
            for replica in range(replicas)
            for rank in range(self.tensor_parallel)
        ]

    @property
    def moe_ranks(self) -> int:
        """The ranks one MoE layer's experts are spread over (each holds 1/moe_ranks of them)."""
        if self.engine == "vllm":
            return self.tensor_parallel * self.data_parallel
        return self.tensor_parallel

    def flag(self, size: str) -> str:
        """How the user wrote one size (``--tp 4``), or the engine's name for it."""
        for name, text in self.spelled:
            if name == size:
                return text
        names = {
            "vllm": {
                "tensor": "--tensor-parallel-size",
                "pipeline": "--pipeline-parallel-size",
                "data": "--data-parallel-size",
            },
            "sglang": {"tensor": "--tp-size", "pipeline": "--pp-size", "data": "--dp-size"},
        }
        return names.get(self.engine, names["vllm"])[size]

    def describe(self) -> str:
        """``TP 4 x PP 1 x DP 2`` with only the sizes that are set."""
        parts = [f"TP {self.tensor_parallel}"]
        if self.pipeline_parallel > 1:
            parts.append(f"PP {self.pipeline_parallel}")
        if self.data_parallel > 1:
            parts.append(
                f"DP {self.data_parallel}" + (" (attention)" if self.data_parallel_attention else "")
            )
        return " x ".join(parts)


_SIZE_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "tensor": ("--tensor-parallel-size",),
        "pipeline": ("--pipeline-parallel-size",),
        "data": ("--data-parallel-size",),
    },
    "sglang": {
        "tensor": ("--tp-size", "--tensor-parallel-size", "--tp"),
        "pipeline": ("--pp-size", "--pipeline-parallel-size", "--pp"),
        "data": ("--dp-size", "--data-parallel-size", "--dp"),
    },
}


def _size(parsed: ParsedParameters, names: tuple[str, ...], strict: bool) -> tuple[int | None, str | None]:
    option = parsed.find(*names)
    if option is None:
        return None, None
    try:
        value = parsed.integer(*names)
    except InvalidInput:
        if strict:
            raise
        return None, None
    spelled = f"{option.typed} {option.values[-1]}" if option.values else option.typed
    return value, spelled


def _stage_layers(env: Mapping[str, str], variable: str = PP_PARTITION_VARIABLE) -> tuple[int, ...] | None:
    text = env.get(variable, "").strip()
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        return None  # param.pipeline-layer-partition names it


def read_layout(
    engine: str, parsed: ParsedParameters, env: Mapping[str, str] | None = None, *, strict: bool = False
) -> Layout:
    """The layout ``parsed`` asks of ``engine``. ``strict``: a size that is not a number is an
    ``InvalidInput`` (the estimator); otherwise it counts as the default (doctor names it apart)."""
    flags = _SIZE_FLAGS.get(engine, _SIZE_FLAGS["vllm"])
    sizes: dict[str, int] = {}
    spelled: list[tuple[str, str]] = []
    for size, names in flags.items():
        value, text = _size(parsed, names, strict)
        if value is not None and value >= 1:
            sizes[size] = value
        if text is not None:
            spelled.append((size, text))
    nodes, _ = _size(parsed, ("--nnodes",), strict)
    environment = env or {}
    if engine == "vllm":
        local, _ = _size(parsed, ("--data-parallel-size-local",), strict)
        backend = (parsed.value_of("--distributed-executor-backend") or "").strip().lower()
        return Layout(
            engine=engine,
            tensor_parallel=sizes.get("tensor", 1),
            pipeline_parallel=sizes.get("pipeline", 1),
            data_parallel=sizes.get("data", 1),
            data_parallel_local=local if local is not None and local >= 1 else None,
            expert_parallel=bool(parsed.switch("--enable-expert-parallel")),
            nodes=nodes if nodes and nodes > 1 else 1,
            spans_nodes=parsed.given("--headless") or backend == "ray",
            ray_backend=backend == "ray",
            stage_layers=_stage_layers(environment),
            spelled=tuple(spelled),
        )
    attention_dp, _ = _size(parsed, ("--attn-dp-size",), strict)
    data = sizes.get("data", 1)
    dp_attention = bool(parsed.switch("--enable-dp-attention")) or bool(attention_dp and attention_dp > 1)
    if attention_dp and attention_dp > 1:
        data = attention_dp
    expert_size, _ = _size(parsed, ("--ep-size", "--expert-parallel-size", "--ep"), strict)
    return Layout(
        engine=engine,
        tensor_parallel=sizes.get("tensor", 1),
        pipeline_parallel=sizes.get("pipeline", 1),
        data_parallel=data,
        expert_parallel=bool(expert_size and expert_size > 1),
        expert_parallel_size=expert_size if expert_size and expert_size > 1 else 1,
        data_parallel_attention=dp_attention,
        nodes=nodes if nodes and nodes > 1 else 1,
        stage_layers=_stage_layers(environment, SGLANG_PP_PARTITION_VARIABLE),
        spelled=tuple(spelled),
    )
