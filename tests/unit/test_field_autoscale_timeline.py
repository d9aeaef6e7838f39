"""The figures the field run's ``autoscale`` step publishes (``scripts/field/field_tune.py``), read
from its per-second samples of the deployment: when the first replica was overloaded, when the
autoscaler asked for another, when the new replica ran and first served, and the replica counts
over time. The samples here are what the step writes to ``timeline.jsonl``; no engine runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

FIELD_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "field"


def _field_tune() -> ModuleType:
    sys.path.insert(0, str(FIELD_SCRIPTS))  # it imports field_common beside it
    try:
        spec = importlib.util.spec_from_file_location("field_tune", FIELD_SCRIPTS / "field_tune.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(FIELD_SCRIPTS))


def _sample(t_s: float, desired: int, *instances: dict[str, Any]) -> dict[str, Any]:
    running = sum(1 for instance in instances if instance["state"] == "running")
    return {"t_s": t_s, "desired": desired, "running": running, "instances": list(instances)}


def _engine(instance_id: int, finished: float = 0, running: float = 0, waiting: float = 0) -> dict[str, Any]:
    return {
        "id": instance_id,
        "state": "running",
        "engine": {"finished": finished, "running": running, "waiting": waiting},
    }


# The load starts at 10.0 s of the sampler's clock; replica 1 queues from 12.0 s; the autoscaler
# asks for a second at 23.0 s; instance 2 starts, runs at 70.0 s (idle) and serves at 71.0 s;
# after the load it is stopped again. One sample failed to read the server.
SAMPLES = [
    _sample(8.0, 1, _engine(1)),
    _sample(11.0, 1, _engine(1, running=8)),
    _sample(12.0, 1, _engine(1, running=8, waiting=40)),
    {"t_s": 13.0, "error": "ReadTimeout: timed out"},
    _sample(23.0, 2, _engine(1, finished=60, running=8, waiting=40), {"id": 2, "state": "starting"}),
    _sample(70.0, 2, _engine(1, finished=300, running=8, waiting=40), _engine(2)),
    _sample(71.0, 2, _engine(1, finished=305, running=8, waiting=16), _engine(2, running=8, waiting=16)),
    _sample(150.0, 1, _engine(1, finished=900)),
]


def test_the_time_from_overload_to_the_new_replica_serving_is_read_from_the_samples() -> None:
    times = _field_tune().scale_up_times(SAMPLES, load_started_s=10.0)
    assert times == {
        "overload_s": 2.0,
        "asked_s": 13.0,
        "new_replica_running_s": 60.0,
        "new_replica_serving_s": 61.0,
        "asked_after_overload_s": 11.0,
        "serving_after_overload_s": 59.0,
        "max_running": 2,
    }


def test_the_replica_counts_over_time_have_one_row_per_change() -> None:
    steps = _field_tune().replica_steps(SAMPLES, load_started_s=10.0)
    assert steps == [
        {"t_s": -2.0, "desired": 1, "running": 1},
        {"t_s": 13.0, "desired": 2, "running": 1},
        {"t_s": 60.0, "desired": 2, "running": 2},
        {"t_s": 140.0, "desired": 1, "running": 1},
    ]


def test_a_replica_that_never_served_has_no_serving_time() -> None:
    samples = SAMPLES[:6]  # instance 2 runs but no request reached it yet
    times = _field_tune().scale_up_times(samples, load_started_s=10.0)
    assert times["new_replica_running_s"] == 60.0
    assert times["new_replica_serving_s"] is None and times["serving_after_overload_s"] is None
