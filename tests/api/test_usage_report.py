"""``GET /api/v1/usage/report``: usage by project, user, key and deployment per hour or day, on
SQLite and PostgreSQL, with CSV export, clear 400s, and a member held to their projects' rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from modelyard.store.tables import ApiKey, Project, ProjectMember, UsageRecord, User

from .conftest import ApiHarness

SINCE = "2026-11-02T00:00:00Z"
UNTIL = "2026-11-04T00:00:00Z"


def _at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def _request(key: ApiKey | None, at: datetime, prompt: int, completion: int, **fields: object) -> UsageRecord:
    return UsageRecord(
        api_key_id=key.id if key is not None else None,
        deployment_name=str(fields.pop("deployment", "chat")),
        endpoint="/v1/chat/completions",
        prompt_tokens=prompt,
        completion_tokens=completion,
        at=at,
        **fields,
    )


@pytest.fixture
def seeded(api: ApiHarness) -> ApiHarness:
    """Projects ``research`` (member ``mia``, her key ``mia-key``) and ``default`` (key ``ops``,
    no owner); an operator ``olga``; requests on 2 and 3 November, one outside the range, one
    without a key; four with a time to first token (the error and the keyless one without).
    Every user has the admin's password (its hash is copied: scrypt is slow)."""
    with api.database.session() as session:
        password_hash = session.scalars(select(User.password_hash).where(User.username == "admin")).one()
        mia = User(username="mia", password_hash=password_hash, role="member")
        olga = User(username="olga", password_hash=password_hash, role="operator")
        research = Project(name="research")
        session.add_all([mia, olga, research])
        session.flush()
        session.add(ProjectMember(project_id=research.id, user_id=mia.id))
        mia_key = ApiKey(
            name="mia-key", prefix="my-mia", key_hash="1" * 64, project_id=research.id, owner_id=mia.id
        )
        ops_key = ApiKey(name="ops", prefix="my-ops", key_hash="2" * 64)
        session.add_all([mia_key, ops_key])
        session.flush()
        session.add_all(
            [
                _request(mia_key, _at(2, 9, 10), 10, 5, ttft_ms=100.0),
                _request(mia_key, _at(2, 9, 50), 20, 7, ttft_ms=300.0),
                _request(mia_key, _at(3, 14), 0, 0, usage_reported=False, status_code=502),
                _request(ops_key, _at(2, 23, 59), 100, 50, deployment="embed", ttft_ms=40.0),
                _request(ops_key, _at(3, 0, 0), 1, 1, ttft_ms=60.0),
                _request(None, _at(3, 8), 4, 0, deployment="embed"),
                _request(mia_key, _at(1, 12), 1000, 1000),  # before since: left out
            ]
        )
        session.commit()
    return api


def _client(api: ApiHarness, username: str) -> Iterator[TestClient]:
    with TestClient(api.client.app) as client:
        client.auth = (username, api.password)
        yield client


@pytest.fixture
def member(seeded: ApiHarness) -> Iterator[TestClient]:
    yield from _client(seeded, "mia")


@pytest.fixture
def operator(seeded: ApiHarness) -> Iterator[TestClient]:
    yield from _client(seeded, "olga")


def _report(client: TestClient, **params: str) -> dict[str, object]:
    response = client.get("/api/v1/usage/report", params={"since": SINCE, "until": UNTIL, **params})
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def _figures(body: dict[str, object]) -> dict[tuple[str, str | None], tuple[int, int, int, int, int]]:
    rows = body["rows"]
    assert isinstance(rows, list)
    return {
        (row["group"], row["bucket_start"]): (
            row["requests"],
            row["prompt_tokens"],
            row["completion_tokens"],
            row["errors"],
            row["requests_without_usage"],
        )
        for row in rows
    }


def test_usage_by_project_per_day_sums_each_projects_keys_in_utc_days(seeded: ApiHarness) -> None:
    body = _report(seeded.client, group_by="project", bucket="day")
    assert _figures(body) == {
        ("research", "2026-11-02T00:00:00Z"): (2, 30, 12, 0, 0),
        ("research", "2026-11-03T00:00:00Z"): (1, 0, 0, 1, 1),
        ("default", "2026-11-02T00:00:00Z"): (1, 100, 50, 0, 0),
        ("default", "2026-11-03T00:00:00Z"): (1, 1, 1, 0, 0),
        ("(no key)", "2026-11-03T00:00:00Z"): (1, 4, 0, 0, 0),
    }
    assert body["buckets"] == ["2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z"]
    assert body["totals"] == {
        "requests": 6,
        "prompt_tokens": 135,
        "completion_tokens": 63,
        "total_tokens": 198,
        "errors": 1,
        "requests_without_usage": 1,
        # 40, 60, 100, 300 ms: the median between 60 and 100, the 90th 70 % of the way to 300.
        "ttft_p50_ms": 80.0,
        "ttft_p90_ms": 240.0,
    }


def test_time_to_first_token_per_project_and_day_is_the_median_and_90th_percentile(
    seeded: ApiHarness,
) -> None:
    body = _report(seeded.client, group_by="project", bucket="day")
    rows = body["rows"]
    assert isinstance(rows, list)
    assert {
        (row["group"], row["bucket_start"]): (row["ttft_p50_ms"], row["ttft_p90_ms"]) for row in rows
    } == {
        ("research", "2026-11-02T00:00:00Z"): (200.0, 280.0),
        ("research", "2026-11-03T00:00:00Z"): (None, None),  # the 502 has none
        ("default", "2026-11-02T00:00:00Z"): (40.0, 40.0),
        ("default", "2026-11-03T00:00:00Z"): (60.0, 60.0),
        ("(no key)", "2026-11-03T00:00:00Z"): (None, None),
    }


def test_usage_by_user_per_hour_tells_a_key_without_owner_from_no_key(seeded: ApiHarness) -> None:
    body = _report(
        seeded.client,
        group_by="user",
        bucket="hour",
        since="2026-11-02T09:00:00Z",
        until="2026-11-03T01:00:00Z",
    )
    assert _figures(body) == {
        ("mia", "2026-11-02T09:00:00Z"): (2, 30, 12, 0, 0),
        ("(no owner)", "2026-11-02T23:00:00Z"): (1, 100, 50, 0, 0),
        ("(no owner)", "2026-11-03T00:00:00Z"): (1, 1, 1, 0, 0),
    }
    buckets = body["buckets"]
    assert isinstance(buckets, list) and len(buckets) == 16  # 09:00 to 00:00, empty hours included


def test_usage_by_deployment_without_bucket_is_one_total_per_deployment(seeded: ApiHarness) -> None:
    body = _report(seeded.client, group_by="deployment")
    assert _figures(body) == {("chat", None): (4, 31, 13, 1, 1), ("embed", None): (2, 104, 50, 0, 0)}
    assert body["buckets"] == []


def test_usage_by_key_is_exported_as_a_csv_attachment(seeded: ApiHarness) -> None:
    response = seeded.client.get(
        "/api/v1/usage/report", params={"group_by": "key", "since": SINCE, "until": UNTIL, "format": "csv"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"] == (
        'attachment; filename="modelyard-usage-by-key-20261102T0000Z-20261104T0000Z.csv"'
    )
    lines = list(csv.reader(io.StringIO(response.text)))
    assert lines[0] == [
        "key",
        "bucket_start",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "errors",
        "requests_without_usage",
        "ttft_p50_ms",
        "ttft_p90_ms",
    ]
    assert lines[1:] == [
        ["(no key)", "2026-11-02T00:00:00Z", "1", "4", "0", "4", "0", "0", "", ""],
        ["mia-key", "2026-11-02T00:00:00Z", "3", "30", "12", "42", "1", "1", "200.0", "280.0"],
        ["ops", "2026-11-02T00:00:00Z", "2", "101", "51", "152", "0", "0", "50.0", "58.0"],
    ]


def test_a_member_sees_only_their_projects_rows(member: TestClient) -> None:
    body = _report(member, group_by="key", bucket="day")
    assert {group for group, _bucket in _figures(body)} == {"mia-key"}
    assert body["totals"] == {
        "requests": 3,
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "total_tokens": 42,
        "errors": 1,
        "requests_without_usage": 1,
        "ttft_p50_ms": 200.0,  # hers alone, not every request's (80 ms)
        "ttft_p90_ms": 280.0,
    }
    by_deployment = _report(member, group_by="deployment")
    assert _figures(by_deployment) == {("chat", None): (3, 30, 12, 1, 1)}  # not the other keys' chat rows


def test_an_operator_sees_every_projects_rows(operator: TestClient) -> None:
    body = _report(operator, group_by="project")
    assert {group for group, _bucket in _figures(body)} == {"research", "default", "(no key)"}


def test_an_admin_sees_every_projects_rows(seeded: ApiHarness) -> None:
    body = _report(seeded.client, group_by="user")
    assert {group for group, _bucket in _figures(body)} == {"mia", "(no owner)", "(no key)"}


def test_relative_spans_count_back_from_now(seeded: ApiHarness) -> None:
    with seeded.database.session() as session:
        session.add(UsageRecord(deployment_name="chat", endpoint="/v1/chat/completions", prompt_tokens=9))
        session.commit()
    response = seeded.client.get("/api/v1/usage/report", params={"group_by": "deployment", "since": "1h"})
    assert response.status_code == 200, response.text
    assert _figures(response.json()) == {("chat", None): (1, 9, 0, 0, 0)}


@pytest.mark.parametrize(
    ("params", "fragments"),
    [
        ({"group_by": "team"}, ["group_by 'team' is not one of project, user, key, deployment"]),
        ({"bucket": "week"}, ["bucket 'week' is not one of hour, day"]),
        ({"since": "yesterday"}, ["since 'yesterday' is not a time"]),
        ({"until": "2026-13-01"}, ["until '2026-13-01' is not a time"]),
        ({"since": UNTIL, "until": SINCE}, ["since (2026-11-04T00:00:00Z) must come before until"]),
        (
            {"since": "2026-01-01", "until": "2026-03-01", "bucket": "hour"},
            ["59 days", "at most 31 days", "bucket=day"],
        ),
        ({"since": "2024-01-01", "until": "2026-01-01"}, ["731 days", "at most 366 days"]),
        ({"format": "xml"}, ["format 'xml' is not one of json, csv"]),
    ],
)
def test_bad_report_parameters_are_400_saying_what_to_change(
    api: ApiHarness, params: dict[str, str], fragments: list[str]
) -> None:
    response = api.client.get("/api/v1/usage/report", params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["hint"], error
    for fragment in fragments:
        assert fragment in f"{error['message']} ({error['hint']})", error
