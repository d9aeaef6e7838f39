"""What a user writes to autoscale a deployment: ``autoscale`` in ``POST /api/v1/deployments`` (and
``PATCH``), stored as JSON in ``deployments.autoscale``.

Usage::

    config = AutoscaleConfig.model_validate(
        {"min": 1, "max": 4, "target": {"metric": "waiting_per_replica", "value": 2},
         "stabilisation_s": 30, "cooldown_s": 60}
    )
    config.down_window_s   # 60: twice the scale-up window unless given
    AutoscaleConfig.model_validate({..., "min": 0, "idle_s": 600})   # scale to zero after 10 min

Every bound is checked here, with a message naming the field, the value and what to do; the
REST API turns a failed check into a 400 naming the field (``autoscale.min`` ...).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from modelyard.control.autoscale.schedule import MAXIMUM_SCHEDULE_ENTRIES, ScheduleEntry

# External API: the names users write in ``autoscale.target.metric``.
AutoscaleMetric = Literal["waiting_per_replica", "kv_cache_use", "ttft_p90_ms"]
METRICS: tuple[AutoscaleMetric, ...] = ("waiting_per_replica", "kv_cache_use", "ttft_p90_ms")

# How each metric reads in a decision's reason ("3.0 waiting per replica for 30 s > 2: 2 → 3").
METRIC_WORDS: dict[AutoscaleMetric, str] = {
    "waiting_per_replica": "waiting per replica",
    "kv_cache_use": "KV cache in use (mean of replicas)",
    "ttft_p90_ms": "ms TTFT p90 at the gateway",
}

MAXIMUM_AUTOSCALE_REPLICAS = 64
MAXIMUM_WINDOW_S = 24 * 3600.0
# Scale to zero: how long the gateway may hold requests for a deployment at zero replicas.
MAXIMUM_HOLD_S = 3600.0
MAXIMUM_HELD_REQUESTS = 10_000


class AutoscaleTarget(BaseModel):
    """The signal to hold near ``value``: requests waiting per ready replica (the engines'
    ``vllm:num_requests_waiting`` / ``sglang:num_queue_reqs``), the mean KV cache use of the ready
    replicas (0 to 1: ``vllm:kv_cache_usage_perc`` / ``sglang:token_usage``), or the gateway's time
    to first token, 90th percentile, in milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: AutoscaleMetric
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _check_value(self) -> Self:
        if self.metric == "kv_cache_use" and self.value > 1:
            raise ValueError(
                f"kv_cache_use is a fraction from 0 to 1, got {self.value:g}: write e.g. 0.8 for 80 %"
            )
        return self


class AutoscaleConfig(BaseModel):
    """Replicas between ``min`` and ``max`` that follow ``target``.

    A scale-up needs the signal above the target for ``stabilisation_s`` since the last change; a
    scale-down needs it below for ``scale_down_stabilisation_s`` (default: twice
    ``stabilisation_s``); no change comes sooner than ``cooldown_s`` after the one before.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: int = Field(ge=0, le=MAXIMUM_AUTOSCALE_REPLICAS)
    max: int = Field(ge=1, le=MAXIMUM_AUTOSCALE_REPLICAS)
    target: AutoscaleTarget
    stabilisation_s: float = Field(default=30.0, ge=0, le=MAXIMUM_WINDOW_S)
    scale_down_stabilisation_s: float | None = Field(default=None, ge=0, le=MAXIMUM_WINDOW_S)
    cooldown_s: float = Field(default=60.0, ge=0, le=MAXIMUM_WINDOW_S)
    # Scale to zero (``min: 0``): the last replica stops after ``idle_s`` without a request; the
    # gateway then holds up to ``max_held_requests`` requests (over every worker) for up to
    # ``max_hold_s`` each while a replica starts, and answers 503 with Retry-After past that.
    idle_s: float = Field(default=300.0, ge=1, le=MAXIMUM_WINDOW_S)
    max_held_requests: int = Field(default=64, ge=1, le=MAXIMUM_HELD_REQUESTS)
    max_hold_s: float = Field(default=120.0, gt=0, le=MAXIMUM_HOLD_S)
    # Minimum replicas by time of day (schedule.py): the load rule applies above them.
    schedule: tuple[ScheduleEntry, ...] = Field(default=(), max_length=MAXIMUM_SCHEDULE_ENTRIES)

    @model_validator(mode="after")
    def _check_bounds(self) -> Self:
        if self.min > self.max:
            raise ValueError(
                f"min ({self.min}) is more than max ({self.max}): set min to at most max, or raise max"
            )
        for index, entry in enumerate(self.schedule):
            if entry.min > self.max:
                raise ValueError(
                    f"schedule[{index}] min ({entry.min}) is more than max ({self.max}): "
                    "lower the schedule's min, or raise max"
                )
        return self

    @property
    def scales_to_zero(self) -> bool:
        return self.min == 0

    @property
    def down_window_s(self) -> float:
        """How long the signal must stay below the target before a scale-down."""
        if self.scale_down_stabilisation_s is not None:
            return self.scale_down_stabilisation_s
        return 2 * self.stabilisation_s

    def clamp(self, replicas: int) -> int:
        return max(self.min, min(self.max, replicas))
