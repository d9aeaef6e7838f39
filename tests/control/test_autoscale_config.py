"""``autoscale`` as a user writes it: each bad value is refused with a message naming it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from modelyard.control.autoscale.config import AutoscaleConfig


def config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"min": 1, "max": 3, "target": {"metric": "waiting_per_replica", "value": 2}}
    return {**base, **changes}


def test_defaults_give_a_longer_window_down_than_up() -> None:
    parsed = AutoscaleConfig.model_validate(config(stabilisation_s=15))
    assert (parsed.stabilisation_s, parsed.down_window_s, parsed.cooldown_s) == (15, 30, 60)


def test_min_zero_scales_to_zero_with_hold_bounds_by_default() -> None:
    parsed = AutoscaleConfig.model_validate(config(min=0))
    assert parsed.scales_to_zero
    assert (parsed.idle_s, parsed.max_held_requests, parsed.max_hold_s) == (300, 64, 120)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (config(min=3, max=2), "min (3) is more than max (2): set min to at most max, or raise max"),
        (config(idle_s=0), "idle_s\n  Input should be greater than or equal to 1"),
        (config(max_held_requests=0), "greater than or equal to 1"),
        (config(max_hold_s=0), "max_hold_s\n  Input should be greater than 0"),
        (
            config(schedule=[{"cron": "0 8 * *", "duration": "10h", "min": 2}]),
            "cron '0 8 * *' has 4 field(s); write five (minute hour day-of-month month day-of-week)",
        ),
        (
            config(schedule=[{"cron": "0 25 * * *", "duration": "10h", "min": 2}]),
            "cron '0 25 * * *' is not a valid cron expression: e.g. '0 8 * * 1-5'",
        ),
        (
            config(schedule=[{"cron": "0 8 * * 1-5", "duration": "10 hours", "min": 2}]),
            "duration '10 hours' is not a duration: write numbers with units d, h, m or s",
        ),
        (
            config(schedule=[{"cron": "0 8 * * 1-5", "duration": "8d", "min": 2}]),
            "duration '8d' must be more than 0 and at most 7 days",
        ),
        (
            config(
                schedule=[{"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Europe/Pariss"}]
            ),
            "timezone 'Europe/Pariss' is not known: write an IANA name such as 'Europe/Paris'",
        ),
        (
            config(schedule=[{"cron": "0 8 * * 1-5", "duration": "10h", "min": 4}]),
            "schedule[0] min (4) is more than max (3): lower the schedule's min, or raise max",
        ),
        (
            config(target={"metric": "gpu_use", "value": 1}),
            "'waiting_per_replica', 'kv_cache_use' or 'ttft_p90_ms'",
        ),
        (
            config(target={"metric": "kv_cache_use", "value": 80}),
            "kv_cache_use is a fraction from 0 to 1, got 80",
        ),
        (config(target={"metric": "waiting_per_replica", "value": -1}), "greater than 0"),
        (config(cooldown_s=-5), "greater than or equal to 0"),
        (config(stabilisation_s=-1), "greater than or equal to 0"),
        (config(min=-1), "greater than or equal to 0"),
        (config(max=65), "less than or equal to 64"),
        (config(window=3), "Extra inputs are not permitted"),
    ],
)
def test_bad_values_are_refused_by_name(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as raised:
        AutoscaleConfig.model_validate(raw)
    assert expected in str(raised.value)
