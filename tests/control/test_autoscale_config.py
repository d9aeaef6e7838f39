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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (config(min=3, max=2), "min (3) is more than max (2): set min to at most max, or raise max"),
        (config(min=0), "min 0 (scale to zero) is not built yet: set min to 1 or more"),
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
