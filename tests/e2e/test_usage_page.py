"""The usage page in a real browser: usage by project, user, key or deployment per day, charted
by plotly.js (served by this server) and tabled, with a CSV download; an admin sees every
project's requests, a member only their projects'. The requests are stored in the server's
``usage_records`` by the test, on days no other test uses, so the figures are exact."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, UsageRecord
from modelyard.testing.http_clients import shared_tls_context

from .conftest import NARROW, WIDE, ConsoleServer, PageWatch
from .pages import horizontal_overflow_px, screenshot, unlabelled_fields, unreachable_by_keyboard, wait_loaded

PROJECT = "usage-lab"
MEMBER = "usage-mia"
PASSWORD = "correct horse battery staple"
RANGE = "since=2026-10-05T00:00:00Z&until=2026-10-07T00:00:00Z"


@pytest.fixture(scope="module")
def metered(console_server: ConsoleServer) -> ConsoleServer:
    """``usage-lab`` (member ``usage-mia``, her key ``lab-key``) and ``ops-key`` in ``default``;
    requests on 5 and 6 October 2026."""
    api = console_server.api
    assert api.post("/api/v1/projects", json={"name": PROJECT}).status_code == 201
    made = api.post("/api/v1/users", json={"username": MEMBER, "password": PASSWORD, "role": "member"})
    assert made.status_code == 201, made.text
    assert api.put(f"/api/v1/projects/{PROJECT}/members/{MEMBER}").status_code == 200
    with httpx.Client(
        base_url=console_server.url, auth=(MEMBER, PASSWORD), timeout=30, verify=shared_tls_context()
    ) as member:
        assert member.post("/api/v1/keys", json={"name": "lab-key"}).status_code == 201
    assert api.post("/api/v1/keys", json={"name": "ops-key"}).status_code == 201
    database = Database.open(f"sqlite:///{console_server.data_dir / 'modelyard.db'}", migrate=False)
    try:
        with database.session() as session:
            keys = {
                key.name: key.id
                for key in session.query(ApiKey).filter(ApiKey.name.in_(["lab-key", "ops-key"]))
            }
            for key, day, prompt, completion, status, ttft_ms in (
                ("lab-key", 5, 10, 5, 200, 100.0),
                ("lab-key", 5, 20, 7, 200, 300.0),
                ("lab-key", 6, 0, 0, 502, None),
                ("ops-key", 6, 100, 50, 200, 40.0),
            ):
                session.add(
                    UsageRecord(
                        api_key_id=keys[key],
                        deployment_name="chat",
                        endpoint="/v1/chat/completions",
                        prompt_tokens=prompt,
                        completion_tokens=completion,
                        usage_reported=status < 400,
                        status_code=status,
                        ttft_ms=ttft_ms,
                        at=datetime(2026, 10, day, 12, tzinfo=UTC),
                    )
                )
            session.commit()
    finally:
        database.close()
    return console_server


# The pages a test opened, with what watches them (to declare an answer the test expects).
WATCHES: dict[int, PageWatch] = {}


def _signed_in(
    browser: Browser, server: ConsoleServer, username: str, password: str, viewport: dict[str, int] = WIDE
) -> Iterator[Page]:
    context = browser.new_context(viewport=viewport, base_url=server.url, timezone_id="UTC")  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    watch = PageWatch(origin=server.url)
    watch.attach(page)
    # Straight to the usage page: a member's dashboard asks for /api/v1/gpus, refused to members.
    page.goto(f"{server.url}/login?next=/usage")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{server.url}/usage")
    wait_loaded(page)
    WATCHES[id(page)] = watch
    yield page
    del WATCHES[id(page)]
    context.close()
    assert not watch.problems, "\n".join(watch.problems)


@pytest.fixture
def admin_page(browser: Browser, metered: ConsoleServer) -> Iterator[Page]:
    yield from _signed_in(browser, metered, "admin", metered.password)


@pytest.fixture
def member_page(browser: Browser, metered: ConsoleServer) -> Iterator[Page]:
    yield from _signed_in(browser, metered, MEMBER, PASSWORD)


def _table(page: Page) -> dict[str, list[str]]:
    """The group table: each row's cells after the group's name, by name."""
    rows: list[list[str]] = page.locator("#groups tbody tr").evaluate_all(
        "(rows) => rows.map((row) => [...row.cells].map((cell) => cell.textContent))"
    )
    return {row[0]: row[1:] for row in rows}


def _open(page: Page, query: str) -> None:
    page.goto(f"/usage?{query}")
    wait_loaded(page)
    expect(page.locator("#groups tbody tr").first).to_be_visible()


def test_an_admin_sees_every_projects_usage_charted_and_tabled(admin_page: Page) -> None:
    page = admin_page
    _open(page, f"group_by=project&bucket=day&{RANGE}")
    # requests, tokens in, tokens out, tokens, errors, without usage, TTFT p50, TTFT p90
    assert _table(page) == {
        PROJECT: ["3", "30", "12", "42", "1", "1", "200 ms", "280 ms"],
        "default": ["1", "100", "50", "150", "0", "0", "40 ms", "40 ms"],
    }
    # 40, 100, 300 ms: the median is 100, the 90th 80 % of the way from 100 to 300.
    expect(page.locator("#totals")).to_contain_text("100 ms / 260 ms")
    expect(page.locator("#totals")).to_contain_text("4requests")
    expect(page.locator("#chart-title")).to_have_text("Tokens per day, by project")
    # plotly drew one stacked trace per project, one bar per day.
    expect(page.locator("#chart g.trace.bars")).to_have_count(2)
    expect(page.locator("#chart g.trace.bars g.point")).to_have_count(4)
    screenshot(page, "usage")
    page.get_by_label("Group by").select_option("key")
    expect(page.locator("#groups-title")).to_have_text("By API key")
    expect(page.locator("#groups tbody tr")).to_have_count(2)
    # The title changes at once, the rows once the report is fetched.
    expect(page.locator("#groups tbody")).to_contain_text("lab-key")
    assert _table(page)["lab-key"] == ["3", "30", "12", "42", "1", "1", "200 ms", "280 ms"]
    assert "group_by=key" in page.url


def test_time_to_first_token_is_charted_as_one_line_per_group(admin_page: Page) -> None:
    page = admin_page
    _open(page, f"group_by=project&bucket=day&{RANGE}")
    page.get_by_label("Chart", exact=True).select_option("ttft_p90_ms")
    expect(page.locator("#chart-title")).to_have_text("TTFT p90 (ms) per day, by project")
    # A line per project, not stacked bars; a day without a TTFT (the 502's) has no point.
    expect(page.locator("#chart g.trace.scatter")).to_have_count(2)
    expect(page.locator("#chart g.trace.bars")).to_have_count(0)
    expect(page.locator("#chart-caption")).to_contain_text("260 ms over every request")
    assert "metric=ttft_p90_ms" in page.url


def test_the_csv_link_downloads_the_rows_shown(admin_page: Page) -> None:
    page = admin_page
    _open(page, f"group_by=user&bucket=day&{RANGE}")
    assert _table(page) == {
        MEMBER: ["3", "30", "12", "42", "1", "1", "200 ms", "280 ms"],
        "admin": ["1", "100", "50", "150", "0", "0", "40 ms", "40 ms"],
    }
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Download CSV").click()
    download = download_info.value
    assert download.suggested_filename == "modelyard-usage-by-user-20261005T0000Z-20261007T0000Z.csv"
    lines = list(csv.DictReader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert [(line["user"], line["bucket_start"], line["total_tokens"]) for line in lines] == [
        ("admin", "2026-10-06T00:00:00Z", "150"),
        (MEMBER, "2026-10-05T00:00:00Z", "42"),
        (MEMBER, "2026-10-06T00:00:00Z", "0"),
    ]


def test_a_member_sees_only_their_projects_usage(member_page: Page) -> None:
    page = member_page
    _open(page, f"group_by=project&bucket=day&{RANGE}")
    assert _table(page) == {PROJECT: ["3", "30", "12", "42", "1", "1", "200 ms", "280 ms"]}
    expect(page.locator("#chart g.trace.bars")).to_have_count(1)
    page.get_by_label("Group by").select_option("deployment")
    expect(page.locator("#groups-title")).to_have_text("By deployment")
    expect(page.locator("#groups tbody tr")).to_have_count(1)
    expect(page.locator("#groups tbody")).to_contain_text("chat")  # the rows once fetched
    # not ops-key's chat request (its 40 ms would make the median 100 ms)
    assert _table(page) == {"chat": ["3", "30", "12", "42", "1", "1", "200 ms", "280 ms"]}


def test_a_range_too_long_for_hours_says_to_use_days(admin_page: Page) -> None:
    page = admin_page
    WATCHES[id(page)].expect(400, "/api/v1/usage/report")
    page.goto("/usage?group_by=project&bucket=hour&since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z")
    wait_loaded(page)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("usage by hour covers at most 31 days")
    expect(alert).to_contain_text("use bucket=day for longer ranges")


def test_the_usage_page_fits_390_px_is_labelled_and_keyboard_reachable(
    browser: Browser, metered: ConsoleServer
) -> None:
    for viewport in (NARROW, WIDE):
        for page in _signed_in(browser, metered, "admin", metered.password, viewport):
            _open(page, f"group_by=project&bucket=day&{RANGE}")
            expect(page.locator("#chart g.trace.bars")).to_have_count(2)
            assert horizontal_overflow_px(page) <= 0
            assert not unlabelled_fields(page)
            screenshot(page, "usage")
            if viewport is WIDE:
                # With a preset range, as the page opens (Tab steps inside a custom range's
                # date fields, which the walk reads as having come round).
                page.goto("/usage")
                wait_loaded(page)
                assert not unreachable_by_keyboard(page)
