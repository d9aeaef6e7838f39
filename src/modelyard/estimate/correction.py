"""The estimate corrected by what the engines of this installation logged when they started.

Every start of a vLLM or SGLang engine under modelyard logs the KV cache it sized. The
controller records each start as a ``StartObservation``: what the estimator predicted (KV bytes
and tokens for that GPU, those flags, that version) against what the engine logged, under a
``StartKey`` (engine, version, GPU model, architecture and the settings that move the overheads:
memory knob, context length, ``--enforce-eager``, KV dtype, TP). ``correction_for`` turns the
observations of the closest key into a ``KvCorrection``; ``apply_correction`` puts it on top of an
estimate. The estimator itself is unchanged: the correction is a layer over its result.

The rule (docs/estimate.md#corrected-by-the-starts-on-this-installation):

- the closest key level with starts wins: these settings, then the same model at another knob or
  context, then the same architecture with other flags, then any model on this engine version,
  GPU model and TP; never across engine versions or GPU models;
- of that level, the last ``WINDOW_STARTS`` starts of the last ``MAX_AGE_DAYS`` days count;
- the correction is the median of their KV offsets (logged minus predicted bytes): the engine's
  overheads the estimator does not model are bytes, so an offset moves with the knob as the
  engine's cache does;
- one start is never applied (it may be the outlier); two are applied when they agree within
  ``AGREEMENT``; from three on, starts further than ``max(AGREEMENT, 3 x 1.4826 x MAD)`` from the
  median are left out as outliers, and it is applied when at least two remain.

Usage::

    key = start_key(estimate, engine_version="0.25.0", architecture="Qwen3ForCausalLM", parameters=[...])
    correction = correction_for(key, observations, now=datetime.now(UTC))
    corrected = apply_correction(estimate, correction) if correction is not None else estimate
    corrected.correction.describe()
    # "corrected by 3 starts on this cluster (these settings), last error +0.4 %"
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from modelyard.backends.parameters import ParsedParameters
from modelyard.estimate.engine_arguments import parse_engine_arguments
from modelyard.estimate.estimate_result import MemoryEstimate, MemoryPlan
from modelyard.estimate.kv_correction import KvCorrection

GIB = 1 << 30
WINDOW_STARTS = 8
MAX_AGE_DAYS = 30
# Two starts agree when their relative KV offsets are this close; also the least outlier distance.
AGREEMENT = 0.02
MAD_TO_SIGMA = 1.4826
# The least headroom a correction leaves: what its starts spread, at least this share of the KV.
LEAST_SPREAD = 0.005
# Without a correction the booking's headroom is the estimator's known error: the median
# |KV memory error| per start on its evaluation split (docs/estimate.md, tests/estimate/evaluation;
# tests/estimate/test_correction.py recomputes it, so a change of the estimator shows here).
UNCORRECTED_HEADROOM_BYTES = {"vllm": int(0.92 * GIB), "sglang": int(0.16 * GIB)}

# Key levels, finest first: (name shown, the fields that must match).
LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "these settings",
        ("memory_fraction", "context_tokens", "enforce_eager", "kv_dtype", "architecture", "tensor_parallel"),
    ),
    (
        "this model at another knob or context",
        ("enforce_eager", "kv_dtype", "architecture", "tensor_parallel"),
    ),
    ("this architecture with other flags", ("architecture", "tensor_parallel")),
    ("other models on this engine and GPU", ("tensor_parallel",)),
)
_BOARDS = (
    "H200 NVL", "H100 NVL", "H200", "H100", "H800", "H20", "A100", "A800", "L40S", "L40", "L20", "L4",
    "A6000", "A40", "A10", "V100", "T4", "B200", "RTX 5090", "RTX 4090", "RTX 3090",
)  # fmt: skip


def gpu_model_key(name: str) -> str:
    """The GPU model starts are grouped by: the board ("H100") when the name has one ("NVIDIA H100
    80GB HBM3", ``--gpus 1xH100``), else the name as given ("GPU 48GB", "NVML double")."""
    squeezed = re.sub(r"[\s_-]", "", name.upper())
    for board in _BOARDS:  # longest names first where one contains another (L40S before L4)
        if board.replace(" ", "") in squeezed:
            return board
    return name.strip()


@dataclass(frozen=True)
class StartKey:
    """What a start is grouped by. ``memory_fraction`` None: not known yet (a placement asks
    before it sets the knob), so only the levels without the knob match."""

    engine: str
    engine_version: str
    gpu_model: str
    architecture: str
    memory_fraction: float | None
    context_tokens: int
    enforce_eager: bool
    kv_dtype: str
    tensor_parallel: int

    def matches(self, other: StartKey, fields: tuple[str, ...]) -> bool:
        if (self.engine, self.engine_version, self.gpu_model) != (
            other.engine,
            other.engine_version,
            other.gpu_model,
        ):
            return False
        for name in fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "memory_fraction":
                if mine is None or theirs is None or round(mine, 3) != round(theirs, 3):
                    return False
            elif mine != theirs:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def start_key(
    estimate: MemoryEstimate,
    *,
    engine_version: str,
    architecture: str | None,
    parameters: Sequence[str] | ParsedParameters,
    knob_known: bool = True,
) -> StartKey:
    """The key of a start of ``estimate`` (``parameters``: the engine's flags, knob included, as
    lines or parsed, as ``estimate_memory`` took them)."""
    arguments = parse_engine_arguments(estimate.engine, parameters, engine_version)
    return StartKey(
        engine=estimate.engine,
        engine_version=engine_version,
        gpu_model=gpu_model_key(estimate.gpu.name),
        architecture=architecture or "unknown",
        memory_fraction=estimate.memory_fraction if knob_known else None,
        context_tokens=estimate.context_tokens,
        enforce_eager=arguments.enforce_eager,
        kv_dtype=estimate.cache.kv_dtype,
        tensor_parallel=estimate.tensor_parallel,
    )


@dataclass(frozen=True)
class StartObservation:
    """One start: the estimator's KV prediction (uncorrected), what modelyard showed for it
    (corrected where a correction applied), and what the engine logged, per GPU."""

    key: StartKey
    observed_at: datetime
    predicted_kv_bytes: int
    predicted_kv_tokens: int
    shown_kv_tokens: int
    logged_kv_bytes: int
    logged_kv_tokens: int

    @property
    def offset_bytes(self) -> int:
        """Logged minus predicted KV bytes: negative when the engine got less than predicted."""
        return self.logged_kv_bytes - self.predicted_kv_bytes

    @property
    def relative_offset(self) -> float:
        return self.offset_bytes / self.predicted_kv_bytes if self.predicted_kv_bytes else 0.0

    @property
    def shown_error(self) -> float:
        """What modelyard showed against what the engine logged (+ = it showed more)."""
        return self.shown_kv_tokens / self.logged_kv_tokens - 1 if self.logged_kv_tokens else 0.0


def observation_from_json(row: Mapping[str, Any]) -> StartObservation:
    """A start as ``GET /api/v1/start-observations`` lists it (the ``start_observations`` row)."""
    return StartObservation(
        key=StartKey(
            engine=str(row["engine"]),
            engine_version=str(row["engine_version"]),
            gpu_model=str(row["gpu_model"]),
            architecture=str(row["architecture"]),
            memory_fraction=float(row["memory_fraction"]),
            context_tokens=int(row["context_tokens"]),
            enforce_eager=bool(row["enforce_eager"]),
            kv_dtype=str(row["kv_dtype"]),
            tensor_parallel=int(row["tensor_parallel"]),
        ),
        observed_at=datetime.fromisoformat(str(row["observed_at"])),
        predicted_kv_bytes=int(row["predicted_kv_bytes"]),
        predicted_kv_tokens=int(row["predicted_kv_tokens"]),
        shown_kv_tokens=int(row["shown_kv_tokens"]),
        logged_kv_bytes=int(row["logged_kv_bytes"]),
        logged_kv_tokens=int(row["logged_kv_tokens"]),
    )


def _recent(observations: Sequence[StartObservation], now: datetime) -> list[StartObservation]:
    oldest = now - timedelta(days=MAX_AGE_DAYS)
    return sorted(
        (observation for observation in observations if observation.observed_at >= oldest),
        key=lambda observation: observation.observed_at,
    )


def correction_for(
    key: StartKey, observations: Sequence[StartObservation], *, now: datetime
) -> KvCorrection | None:
    """The correction for ``key`` from the closest level with starts, or None (no start yet)."""
    recent = _recent(observations, now)
    for level, fields in LEVELS:
        if "memory_fraction" in fields and key.memory_fraction is None:
            continue
        mine = [observation for observation in recent if observation.key.matches(key, fields)]
        if mine:
            return _rule(level, mine[-WINDOW_STARTS:])
    return None


def _rule(level: str, window: list[StartObservation]) -> KvCorrection:
    last_error = window[-1].shown_error
    relative = [observation.relative_offset for observation in window]

    def result(kept: list[StartObservation], applied: bool, note: str | None = None) -> KvCorrection:
        offsets = [observation.offset_bytes for observation in kept]
        middle = int(statistics.median(offsets))
        spread = max(abs(offset - middle) for offset in offsets)
        least = int(LEAST_SPREAD * statistics.median(o.predicted_kv_bytes for o in kept))
        return KvCorrection(
            level=level,
            starts=len(kept),
            outliers=len(window) - len(kept),
            offset_bytes=middle,
            relative_offset=statistics.median(o.relative_offset for o in kept),
            spread_bytes=max(spread, least),
            last_error=last_error,
            applied=applied,
            note=note,
        )

    if len(window) == 1:
        return result(window, False, f"one start ({level}) is not enough, a second must agree")
    if len(window) == 2:
        if abs(relative[0] - relative[1]) > AGREEMENT:
            shown = ", ".join(f"{value * 100:+.1f} %" for value in relative)
            return result(window, False, f"the two starts ({level}) disagree ({shown})")
        return result(window, True)
    middle = statistics.median(relative)
    deviation = statistics.median(abs(value - middle) for value in relative)
    limit = max(AGREEMENT, 3 * MAD_TO_SIGMA * deviation)
    kept = [observation for observation in window if abs(observation.relative_offset - middle) <= limit]
    if len(kept) < 2:
        return result(window, False, f"the {len(window)} starts ({level}) disagree")
    return result(kept, True)


def _corrected_plan(plan: MemoryPlan, offset_bytes: int, context_tokens: int) -> MemoryPlan:
    if plan.kv_cache_bytes <= 0:
        return plan
    kv_bytes = max(0, plan.kv_cache_bytes + offset_bytes)
    scale = kv_bytes / plan.kv_cache_bytes
    tokens = math.floor(plan.kv_cache_tokens * scale)
    concurrency = plan.max_concurrency * scale
    problem = plan.problem
    fits = plan.fits
    if fits and concurrency < 1:
        fits = False
        problem = (
            f"corrected by this cluster's starts, the KV cache holds {tokens:,} tokens, less than one "
            f"sequence of {context_tokens:,} tokens"
        )
    return replace(
        plan,
        kv_cache_bytes=kv_bytes,
        kv_cache_tokens=tokens,
        max_concurrency=round(concurrency, 2),
        fits=fits,
        problem=problem,
    )


def apply_correction(estimate: MemoryEstimate, correction: KvCorrection) -> MemoryEstimate:
    """``estimate`` with the correction's KV offset on both plans and the knob it recommends
    raised by what the engine lacked; unchanged (but carrying the correction) when not applied."""
    if not correction.applied:
        return replace(estimate, correction=correction)
    offset = correction.offset_bytes
    recommended = estimate.recommended_memory_fraction
    if recommended is not None and offset < 0:
        total = estimate.gpu.memory_total_bytes
        ceiling = estimate.safe_memory_fraction
        if estimate.engine == "vllm" and estimate.gpu.memory_free_bytes is not None:
            ceiling = min(ceiling, estimate.gpu.memory_free_bytes / total)
        raised = math.ceil((recommended + -offset / total) * 100) / 100
        recommended = max(recommended, min(raised, ceiling))
    return replace(
        estimate,
        plan_on_total=_corrected_plan(estimate.plan_on_total, offset, estimate.context_tokens),
        plan_on_free=(
            _corrected_plan(estimate.plan_on_free, offset, estimate.context_tokens)
            if estimate.plan_on_free is not None
            else None
        ),
        recommended_memory_fraction=recommended,
        correction=correction,
        uncorrected_plan_on_total=estimate.plan_on_total,
        uncorrected_plan_on_free=estimate.plan_on_free,
    )


def booking_headroom_bytes(engine: str, correction: KvCorrection | None) -> int:
    """What a booking adds to the estimate so that the engine gets at least the KV it was booked
    for: the bytes the engine lacked (the correction's offset, when negative) and the spread of
    its starts; without an applied correction, the estimator's known error."""
    if correction is None or not correction.applied:
        return UNCORRECTED_HEADROOM_BYTES.get(engine, 0)
    return max(0, -correction.offset_bytes) + correction.spread_bytes
