"""Schedules (``autoscale.schedule``) and scale to zero in the rule, on injected clocks: no sleeps.

The pure parts first (which window is open when, what the rule decides with a schedule minimum,
an idle time, a held request), then the loop on a real store with its wall clock and monotonic
clock given by the test: a schedule's window opening raises the replicas with a reason naming it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.control.autoscale.loop import AutoscaleLoop
from modelyard.control.autoscale.policy import PolicyInput, Sample, decide
from modelyard.control.autoscale.schedule import ScheduleEntry, schedule_minimum
from modelyard.control.endpoints import Endpoint, EndpointRegistry
from modelyard.store.database import Database
from modelyard.store.tables import AutoscaleEvent, Deployment

from .conftest import add_deployment

WORKING_HOURS = ScheduleEntry.model_validate(
    {"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Europe/Paris", "name": "working hours"}
)


def at_paris(day: int, hour: int, minute: int = 0) -> datetime:
    """December 2026 in Paris (UTC+1): the 7th is a Monday, the 12th a Saturday."""
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC) - timedelta(hours=1)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (at_paris(7, 7, 59), 0),  # Monday, a minute before the window
        (at_paris(7, 8, 0), 2),  # at the cron's minute
        (at_paris(7, 17, 59), 2),
        (at_paris(7, 18, 0), 0),  # 10 h later: closed
        (at_paris(12, 9, 0), 0),  # Saturday
    ],
)
def test_a_window_is_open_from_the_cron_time_for_its_duration_in_its_timezone(
    now: datetime, expected: int
) -> None:
    minimum, label = schedule_minimum([WORKING_HOURS], now)
    assert minimum == expected
    assert label == ("'working hours'" if expected else "")


def test_the_highest_minimum_of_the_open_windows_counts() -> None:
    lunch = ScheduleEntry.model_validate({"cron": "0 12 * * *", "duration": "2h", "min": 3})
    minimum, label = schedule_minimum([WORKING_HOURS, lunch], datetime(2026, 12, 7, 12, 30, tzinfo=UTC))
    assert (minimum, label) == (3, "'0 12 * * *' for 2h (UTC)")


def config(**changes: Any) -> AutoscaleConfig:
    base: dict[str, Any] = {
        "min": 0,
        "max": 4,
        "target": {"metric": "waiting_per_replica", "value": 2},
        "stabilisation_s": 30,
        "cooldown_s": 60,
        "idle_s": 300,
    }
    return AutoscaleConfig.model_validate({**base, **changes})


def rule(desired: int, **fields: Any) -> PolicyInput:
    values: dict[str, Any] = {
        "now_s": 1000.0,
        "samples": [Sample(at_s=1000.0, value=0.0)],
        "desired_replicas": desired,
        "ready_replicas": desired,
        "last_change_at_s": None,
        "config": config(),
    }
    return PolicyInput(**{**values, **fields})


def test_a_schedule_minimum_raises_the_replicas_with_a_reason_naming_it() -> None:
    decision = decide(rule(1, schedule_minimum=2, schedule_name="'working hours'"))
    assert (decision.desired_replicas, decision.direction) == (2, "up")
    assert decision.reason == "schedule 'working hours' keeps at least 2 replica(s): 1 → 2"


def test_load_above_the_schedule_minimum_still_scales_up() -> None:
    samples = [Sample(at_s=1000.0 - second, value=6.0) for second in range(31, -1, -1)]
    decision = decide(rule(2, samples=samples, schedule_minimum=2, schedule_name="'working hours'"))
    assert (decision.desired_replicas, decision.direction) == (4, "up")  # ceil(2 × 6 / 2) = 6, max 4


def test_a_scale_down_stops_at_the_schedule_minimum() -> None:
    samples = [Sample(at_s=1000.0 - second, value=0.0) for second in range(61, -1, -1)]
    decision = decide(rule(3, samples=samples, schedule_minimum=2, schedule_name="'working hours'"))
    assert (decision.desired_replicas, decision.direction) == (2, "down")


def test_no_request_for_idle_s_scales_to_zero() -> None:
    decision = decide(rule(1, idle_for_s=301.0))
    assert (decision.desired_replicas, decision.direction) == (0, "down")
    assert decision.reason == "no request for 301 s (idle_s 300): 1 → 0, scaled to zero"


def test_an_open_schedule_window_keeps_its_minimum_through_idle() -> None:
    decision = decide(rule(2, idle_for_s=5000.0, schedule_minimum=2, schedule_name="'working hours'"))
    assert decision.direction == "hold"


def test_less_idle_than_idle_s_holds_one_replica() -> None:
    samples = [Sample(at_s=1000.0 - second, value=0.0) for second in range(61, -1, -1)]
    decision = decide(rule(1, samples=samples, idle_for_s=299.0))
    assert (decision.desired_replicas, decision.direction) == (1, "hold")


def test_a_held_request_wakes_a_zero_scaled_deployment_inside_the_cool_down() -> None:
    decision = decide(rule(0, held_requests=3, last_change_at_s=999.0, samples=[Sample(1000.0, None)]))
    assert (decision.desired_replicas, decision.direction) == (1, "up")
    assert decision.reason == "3 request(s) held at the gateway while scaled to zero: 0 → 1"


def test_at_zero_with_no_request_it_stays_at_zero() -> None:
    decision = decide(rule(0, samples=[Sample(1000.0, None)], idle_for_s=10.0))
    assert decision == decision.__class__(0, "hold", "scaled to zero: the next request starts a replica")


class Clocks:
    def __init__(self, wall: datetime) -> None:
        self.wall = wall
        self.monotonic_s = 0.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.monotonic_s += seconds


async def test_the_loop_follows_the_schedule_on_its_wall_clock(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    (tmp_path / "model").mkdir()
    autoscale = {
        "min": 0,
        "max": 3,
        "target": {"metric": "waiting_per_replica", "value": 2},
        "idle_s": 60,
        "schedule": [WORKING_HOURS.model_dump()],
    }
    add_deployment(database, tmp_path / "model", replicas=0, autoscale=autoscale)
    clocks = Clocks(at_paris(7, 7, 59))
    pokes: list[None] = []
    registry = EndpointRegistry()
    loop = AutoscaleLoop(
        database=database,
        endpoints=registry,
        poke=lambda: pokes.append(None),
        monotonic=lambda: clocks.monotonic_s,
        wall_clock=lambda: clocks.wall,
        activity_source=lambda name: None,
    )
    try:
        assert await loop.step() == []  # before the window: stays at zero
        clocks.advance(60)  # 08:00 Paris
        [opened] = await loop.step()
        assert (opened.desired_replicas, opened.reason) == (
            2,
            "schedule 'working hours' keeps at least 2 replica(s): 0 → 2",
        )
        # Both replicas ready (a starting replica never counts as idle).
        registry.publish("chat", [Endpoint("chat", index, "http://127.0.0.1:9", "chat") for index in (0, 1)])
        clocks.advance(10 * 3600)  # 18:00: the window closed; no request all day
        [closed] = await loop.step()
        assert (closed.desired_replicas, closed.direction) == (0, "down")
        assert closed.reason.endswith("(idle_s 60): 2 → 0, scaled to zero")
    finally:
        await loop.shutdown()
    with database.session() as session:
        events = session.scalars(select(AutoscaleEvent).order_by(AutoscaleEvent.id))
        reasons = [event.reason for event in events]
        deployment = session.scalar(select(Deployment))
        assert deployment is not None and deployment.replicas == 0
    assert reasons == [opened.reason, closed.reason] and len(pokes) == 2
