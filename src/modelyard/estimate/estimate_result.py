"""What the estimator answers: the plan on one basis (``MemoryPlan``) and the whole estimate
(``MemoryEstimate``), which ``modelyard estimate``, the doctor, placements and the correction read.
``estimate/memory.py`` computes them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from modelyard.estimate.gpus import GpuSpec
from modelyard.estimate.kv_cache import CacheShape
from modelyard.estimate.kv_tokens import sequences_cache_bytes
from modelyard.estimate.stages import StageEstimate

if TYPE_CHECKING:
    from modelyard.estimate.kv_correction import KvCorrection
    from modelyard.estimate.speculative import SpeculativeMemory

Basis = Literal["total", "free"]


@dataclass(frozen=True)
class MemoryPlan:
    """The outcome on one basis: ``total`` (an idle GPU) or ``free`` (the GPU as it is now)."""

    basis: Basis
    gpu_memory_bytes: int
    budget_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_concurrency: float
    fits: bool
    problem: str | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    """Everything ``modelyard estimate`` prints, per GPU of the largest share."""

    engine: str
    gpu: GpuSpec
    gpu_count: int
    tensor_parallel: int
    pipeline_parallel: int
    context_tokens: int
    memory_knob: str
    memory_fraction: float
    memory_fraction_is_default: bool
    weights_bytes: int
    weights_source: str
    cache: CacheShape
    activation_bytes: int
    cuda_graph_bytes: int
    non_torch_bytes: int
    encoder_loaded: bool
    plan_on_total: MemoryPlan
    plan_on_free: MemoryPlan | None
    recommended_memory_fraction: float | None
    # The highest knob value that leaves room for what lives outside the engine's budget.
    safe_memory_fraction: float
    max_context_tokens_at_safe_fraction: int
    notes: list[str] = field(default_factory=list)
    # With pipeline parallelism: each stage (layers, GPU, weights, KV); the figures above are the
    # limiting stage's, the one with the fewest KV tokens (the one that does not fit, if any).
    stages: list[StageEstimate] = field(default_factory=list)
    limiting_stage: int | None = None
    # Prefix caching as given (None: the engine's default; vLLM's hybrid models then keep one
    # state block a sequence, two with it on).
    prefix_caching: bool | None = None
    # Put on by ``correction.apply_correction`` from the starts logged on this installation, with
    # the plans as the estimator made them (None: no correction applied, the plans are the raw ones).
    correction: KvCorrection | None = None
    uncorrected_plan_on_total: MemoryPlan | None = None
    uncorrected_plan_on_free: MemoryPlan | None = None
    # Speculative decoding's draft model (or the model's MTP layers): counted in ``weights_bytes``
    # and ``cache`` above, shown apart.
    speculative: SpeculativeMemory | None = None
    # vLLM: the engine takes its CUDA graphs (``cuda_graph_bytes``) out of the KV budget, inside
    # the knob's share (``graph_budget.vllm_cuda_graphs_in_budget``); False: they live outside it.
    cuda_graphs_in_budget: bool = False

    def cache_bytes_for(self, sequences: int) -> int:
        """The KV cache (and state) ``sequences`` sequences of the context need on one GPU, as
        the engine pages them (``kv_tokens.sequences_cache_bytes``)."""
        return sequences_cache_bytes(
            self.cache, self.context_tokens, self.engine, sequences, prefix_caching=self.prefix_caching
        )

    @property
    def fits(self) -> bool:
        plan = self.plan_on_free or self.plan_on_total
        return plan.fits

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["fits"] = self.fits
        data["correction"] = self.correction.to_json() if self.correction is not None else None
        if self.correction is not None:
            data["correction"]["summary"] = correction_summary(self)
        return data


_GIB = 1 << 30


def correction_summary(estimate: MemoryEstimate, *, on_total: bool = False) -> str | None:
    """What the correction did to ``estimate``, for people: how many starts, the KV bytes it moved
    and the estimator's own figure before it (None: no correction), on the GPU as it is now where
    the estimate has that plan, else (or with ``on_total``) on an idle GPU::

        corrected by 3 starts on this cluster (these settings), last error +0.0 %: KV cache
        -0.52 GiB per GPU (-7.0 %), 74,576 tokens before correction (80,192 after)
    """
    correction = estimate.correction
    if correction is None:
        return None
    raw, plan = estimate.uncorrected_plan_on_total, estimate.plan_on_total
    if not on_total and estimate.plan_on_free is not None:
        raw, plan = estimate.uncorrected_plan_on_free, estimate.plan_on_free
    if not correction.applied or raw is None:
        return correction.describe()
    moved = plan.kv_cache_bytes - raw.kv_cache_bytes
    share = round(moved / raw.kv_cache_bytes * 100, 1) if raw.kv_cache_bytes else 0.0
    return (
        f"{correction.describe()}: KV cache {moved / _GIB:+.2f} GiB per GPU ({share or 0.0:+.1f} %), "
        f"{raw.kv_cache_tokens:,} tokens before correction ({plan.kv_cache_tokens:,} after)"
    )
