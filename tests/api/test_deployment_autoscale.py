"""``autoscale`` through the REST API: set at deploy time, changed and removed with PATCH, shown
with the autoscaler's decisions; bad settings refused by name, replicas by hand refused while set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelyard.store.tables import AutoscaleEvent

from .conftest import ApiHarness, add_model, assert_error

AUTOSCALE: dict[str, Any] = {
    "min": 2,
    "max": 4,
    "target": {"metric": "waiting_per_replica", "value": 2},
    "stabilisation_s": 30,
    "cooldown_s": 60,
}


@pytest.fixture
def with_model(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    return api


def test_deploy_with_autoscale_starts_within_its_bounds(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "autoscale": AUTOSCALE})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["replicas"] == 2  # replicas 1 asked (the default), min 2
    assert body["autoscale"]["target"] == {"metric": "waiting_per_replica", "value": 2.0}
    assert body["autoscale"]["max"] == 4


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"min": 5, "max": 2}, ("autoscale", "min (5) is more than max (2)")),
        ({"target": {"metric": "gpu_use", "value": 1}}, ("autoscale.target.metric", "'waiting_per_replica'")),
        ({"cooldown_s": -1}, ("autoscale.cooldown_s", "greater than or equal to 0")),
        ({"target": {"metric": "kv_cache_use", "value": 80}}, ("kv_cache_use is a fraction from 0 to 1",)),
        (
            {"schedule": [{"cron": "0 25 * * *", "duration": "10h", "min": 2}]},
            ("autoscale.schedule.0.cron", "cron '0 25 * * *' is not a valid cron expression"),
        ),
        (
            {"schedule": [{"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Mars/Olympus"}]},
            ("autoscale.schedule.0.timezone", "timezone 'Mars/Olympus' is not known"),
        ),
        ({"max_hold_s": 0}, ("autoscale.max_hold_s", "greater than 0")),
    ],
)
def test_bad_autoscale_is_refused_naming_the_field(
    with_model: ApiHarness, change: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "autoscale": {**AUTOSCALE, **change}}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", *fragments)
    assert with_model.client.get("/api/v1/deployments").json() == []


def test_min_zero_and_a_schedule_are_stored_as_given(with_model: ApiHarness) -> None:
    scaling_to_zero = {
        **AUTOSCALE,
        "min": 0,
        "idle_s": 600,
        "schedule": [{"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Europe/Paris"}],
    }
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "autoscale": scaling_to_zero}
    )
    assert response.status_code == 201, response.text
    stored = response.json()["autoscale"]
    assert (stored["min"], stored["idle_s"], stored["max_held_requests"], stored["max_hold_s"]) == (
        0,
        600,
        64,
        120,
    )
    assert stored["schedule"] == [
        {"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Europe/Paris", "name": None}
    ]


def test_replicas_by_hand_are_refused_while_autoscaled_and_allowed_after_removing_it(
    with_model: ApiHarness,
) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    patched = api.client.patch("/api/v1/deployments/tiny", json={"autoscale": AUTOSCALE})
    assert patched.status_code == 200, patched.text
    assert patched.json()["replicas"] == 2
    refused = api.client.patch("/api/v1/deployments/tiny", json={"replicas": 3})
    assert refused.status_code == 409
    assert_error(refused.json(), "conflict", "autoscaled (2 to 4 replicas)")
    assert '{"autoscale": null}' in refused.json()["error"]["hint"]
    removed = api.client.patch("/api/v1/deployments/tiny", json={"autoscale": None})
    assert removed.json()["autoscale"] is None and removed.json()["replicas"] == 2
    assert api.client.patch("/api/v1/deployments/tiny", json={"replicas": 3}).json()["replicas"] == 3


def test_the_autoscale_view_lists_the_decisions_with_their_reasons(with_model: ApiHarness) -> None:
    api = with_model
    created = api.client.post("/api/v1/deployments", json={"model": "tiny", "autoscale": AUTOSCALE}).json()
    with api.database.session() as session:
        session.add(
            AutoscaleEvent(
                deployment_name="tiny",
                deployment_uid=created["uid"],
                direction="up",
                from_replicas=2,
                to_replicas=3,
                reason="3.0 waiting per replica for 30 s > 2: 2 → 3",
            )
        )
        session.commit()
    view = api.client.get("/api/v1/deployments/tiny/autoscale").json()
    assert view["autoscale"]["min"] == 2 and view["desired_replicas"] == 2
    assert [(e["direction"], e["reason"]) for e in view["events"]] == [
        ("up", "3.0 waiting per replica for 30 s > 2: 2 → 3")
    ]


def test_setting_and_removing_autoscale_are_audited_with_what_was_stored(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    assert api.client.patch("/api/v1/deployments/tiny", json={"autoscale": AUTOSCALE}).status_code == 200
    assert api.client.patch("/api/v1/deployments/tiny", json={"autoscale": None}).status_code == 200
    refused = api.client.patch("/api/v1/deployments/tiny", json={"autoscale": {**AUTOSCALE, "min": 9}})
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {"field": "autoscale"}
    rows = api.client.get("/api/v1/audit", params={"object_name": "tiny", "action": "update"}).json()[
        "events"
    ]
    removed, set_ = rows  # newest first; the refused change has no row
    assert (set_["actor"], set_["project"]) == ("admin", "default")
    assert set_["details"]["autoscale"]["min"] == 2 and set_["details"]["autoscale"]["idle_s"] == 300
    assert removed["details"] == {"autoscale": None}
