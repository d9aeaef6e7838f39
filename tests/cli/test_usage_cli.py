"""``modelyard usage --by ... --since ... [--bucket day] [--csv]`` against a real server on
loopback (the real REST API and database): the figures of rows stored in ``usage_records``."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from modelyard.store.tables import ApiKey, Project, UsageRecord

from .conftest import LiveServer


@pytest.fixture
def metered(live_server: LiveServer) -> LiveServer:
    """Two days ago and today: key ``ci`` (project ``research``) on ``chat``; ``batch`` (project
    ``default``) on ``embed``, one of its requests an error without usage (and without a time to
    first token)."""
    now = datetime.now(UTC)
    with live_server.database.session() as session:
        research = Project(name="research")
        session.add(research)
        session.flush()
        ci = ApiKey(name="ci", prefix="my-ci", key_hash="1" * 64, project_id=research.id)
        batch = ApiKey(name="batch", prefix="my-batch", key_hash="2" * 64)
        session.add_all([ci, batch])
        session.flush()
        for key, deployment, prompt, completion, status, at, ttft_ms in (
            (ci, "chat", 12, 30, 200, now - timedelta(days=2), 90.0),
            (ci, "chat", 8, 10, 200, now, 110.0),
            (batch, "embed", 500, 0, 200, now, 50.0),
            (batch, "embed", 0, 0, 502, now, None),
        ):
            session.add(
                UsageRecord(
                    api_key_id=key.id,
                    deployment_name=deployment,
                    endpoint="/v1/chat/completions",
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    usage_reported=status < 400,
                    status_code=status,
                    ttft_ms=ttft_ms,
                    at=at,
                )
            )
        session.commit()
    return live_server


def test_usage_by_project_prints_each_projects_totals_and_the_sum(metered: LiveServer) -> None:
    result = metered.cli("usage", "--by", "project", "--since", "7d")
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:]}
    # PROJECT REQUESTS PROMPT COMPLETION ERRORS NO-USAGE TTFT-P50 TTFT-P90
    assert lines["research"] == ["2", "20", "40", "0", "0", "100", "ms", "108", "ms"]
    assert lines["default"] == ["2", "500", "0", "1", "1", "50", "ms", "50", "ms"]
    # 50, 90, 110 ms: the median 90, the 90th percentile 80 % of the way from 90 to 110.
    assert lines["total"] == ["4", "520", "40", "1", "1", "90", "ms", "106", "ms"]


def test_usage_since_leaves_out_older_requests(metered: LiveServer) -> None:
    result = metered.cli("usage", "--by", "key", "--since", "1d", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["group"]: row for row in json.loads(result.stdout)["rows"]}
    assert (rows["ci"]["requests"], rows["ci"]["prompt_tokens"]) == (1, 8)


def test_usage_per_day_as_csv_has_one_line_per_deployment_and_day(metered: LiveServer) -> None:
    result = metered.cli("usage", "--by", "deployment", "--bucket", "day", "--csv")
    assert result.exit_code == 0, result.output
    lines = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(line["deployment"], line["requests"], line["total_tokens"]) for line in lines] == [
        ("chat", "1", "42"),
        ("chat", "1", "18"),
        ("embed", "2", "500"),
    ]
    today = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
    assert lines[-1]["bucket_start"] == today


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--by", "team"), "group_by 'team' is not one of project, user, key, deployment"),
        (("--since", "last week"), "since 'last week' is not a time"),
        (("--bucket", "hour", "--since", "60d"), "usage by hour covers at most 31 days"),
    ],
)
def test_a_bad_usage_option_is_one_line_saying_what_to_do(
    metered: LiveServer, arguments: tuple[str, ...], message: str
) -> None:
    result = metered.cli("usage", *arguments)
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
