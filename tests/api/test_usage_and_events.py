"""Usage totals by key and deployment, and a deployment's events (its instances' and the
autoscaler's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from modelyard.store.tables import ApiKey, AutoscaleEvent, InstanceEvent, UsageRecord

from .conftest import ApiHarness, assert_error


def _seed_usage(api: ApiHarness) -> None:
    with api.database.session() as session:
        key = ApiKey(name="ci", prefix="my-abcde", key_hash="0" * 64)
        session.add(key)
        session.flush()
        old = datetime.now(UTC) - timedelta(days=2)
        session.add_all(
            [
                UsageRecord(
                    api_key_id=key.id,
                    deployment_name="chat",
                    endpoint="chat",
                    prompt_tokens=10,
                    completion_tokens=5,
                ),
                UsageRecord(
                    api_key_id=key.id,
                    deployment_name="chat",
                    endpoint="chat",
                    prompt_tokens=7,
                    completion_tokens=3,
                    at=old,
                ),
                UsageRecord(
                    api_key_id=key.id,
                    deployment_name="chat",
                    endpoint="chat",
                    usage_reported=False,
                    prompt_tokens=0,
                    completion_tokens=0,
                    status_code=502,
                ),
                UsageRecord(api_key_id=None, deployment_name="embed", endpoint="embeddings", prompt_tokens=4),
            ]
        )
        session.commit()


def test_usage_sums_tokens_by_key_and_deployment(api: ApiHarness) -> None:
    _seed_usage(api)
    body = api.client.get("/api/v1/usage").json()
    rows = {(row["key"], row["deployment"]): row for row in body["rows"]}
    chat = rows[("ci", "chat")]
    assert (chat["requests"], chat["prompt_tokens"], chat["completion_tokens"]) == (3, 17, 8)
    assert (chat["requests_without_usage"], chat["errors"], chat["total_tokens"]) == (1, 1, 25)
    assert rows[(None, "embed")]["prompt_tokens"] == 4
    assert body["total_tokens"] == 29


def test_usage_since_leaves_out_older_requests(api: ApiHarness) -> None:
    _seed_usage(api)
    since = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    body = api.client.get("/api/v1/usage", params={"since": since}).json()
    chat = next(row for row in body["rows"] if row["deployment"] == "chat")
    assert chat["prompt_tokens"] == 10


def test_usage_with_until_before_since_is_400(api: ApiHarness) -> None:
    response = api.client.get(
        "/api/v1/usage", params={"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "until")


def test_usage_with_a_date_that_is_not_one_is_400_naming_it(api: ApiHarness) -> None:
    response = api.client.get("/api/v1/usage", params={"since": "yesterday"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'since'")


def test_events_are_listed_oldest_first_and_kept_after_removal(api: ApiHarness) -> None:
    with api.database.session() as session:
        start = datetime.now(UTC)
        for offset, (old, new) in enumerate([("pending", "starting"), ("starting", "running")]):
            session.add(
                InstanceEvent(
                    deployment_name="gone",
                    instance_id=1,
                    replica_index=0,
                    from_state=old,
                    to_state=new,
                    reason=f"step {offset}",
                    at=start + timedelta(seconds=offset),
                )
            )
        session.commit()
    events = api.client.get("/api/v1/deployments/gone/events").json()
    assert [event["to_state"] for event in events] == ["starting", "running"]
    assert (
        api.client.get("/api/v1/deployments/gone/events", params={"limit": 1}).json()[0]["to_state"]
        == "running"
    )


def test_events_of_an_unknown_deployment_are_404(api: ApiHarness) -> None:
    assert api.client.get("/api/v1/deployments/ghost/events").status_code == 404


def test_the_autoscalers_decisions_are_events_in_time_order_with_the_instances(api: ApiHarness) -> None:
    start = datetime.now(UTC)
    with api.database.session() as session:
        session.add(
            InstanceEvent(
                deployment_name="gone", deployment_uid="u1", instance_id=1, replica_index=0,
                from_state="starting", to_state="running", reason="ready", at=start,
            )
        )  # fmt: skip
        for seconds, direction, replicas, reason in [
            (1, "up", (1, 2), "3.0 waiting per replica for 31 s > 2: 1 → 2"),
            (3, "unplaced", (2, 2), "replica 1 cannot be placed yet; ..."),
        ]:
            session.add(
                AutoscaleEvent(
                    deployment_name="gone", deployment_uid="u1", direction=direction,
                    from_replicas=replicas[0], to_replicas=replicas[1], reason=reason,
                    at=start + timedelta(seconds=seconds),
                )
            )  # fmt: skip
        session.add(
            InstanceEvent(
                deployment_name="gone", deployment_uid="u1", instance_id=2, replica_index=1,
                from_state="stopped", to_state="pending", reason="waiting for placement: ...",
                at=start + timedelta(seconds=2),
            )
        )  # fmt: skip
        session.commit()
    events = api.client.get("/api/v1/deployments/gone/events").json()
    assert [(e["kind"], e["to_state"] or e["direction"]) for e in events] == [
        ("instance", "running"),
        ("autoscale", "up"),
        ("instance", "pending"),
        ("autoscale", "unplaced"),
    ]
    assert events[1]["reason"] == "3.0 waiting per replica for 31 s > 2: 1 → 2"
    assert (events[1]["from_replicas"], events[1]["to_replicas"], events[1]["instance_id"]) == (1, 2, None)
    newest = api.client.get("/api/v1/deployments/gone/events", params={"limit": 2}).json()
    assert [(e["kind"], e["direction"]) for e in newest] == [("instance", None), ("autoscale", "unplaced")]
