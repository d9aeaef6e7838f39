"""Console sessions live in the database: only a token digest stored, idle and absolute ends,
found again after a restart (a new store on the reopened database), revoked by an admin.

A real database (SQLite file and PostgreSQL) under the real REST API; the clock is a
``ManualClock``-style counter passed to the store, never a sleep.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy import select

from modelyard.server.session_options import SessionOptions
from modelyard.server.sessions import SESSION_COOKIE, SessionStore
from modelyard.services.users import get_user
from modelyard.store.database import Database
from modelyard.store.sign_in_tables import ConsoleSessionRow

from .conftest import ApiHarness, assert_error

START_S = 1_800_000_000.0


@dataclass
class WallClock:
    now_s: float = START_S

    def __call__(self) -> float:
        return self.now_s


def _store(database: Database, clock: WallClock, **options: float) -> SessionStore:
    return SessionStore(database, SessionOptions(**options), clock)  # type: ignore[arg-type]


def _open(api: ApiHarness, store: SessionStore) -> str:
    with api.database.session() as session:
        admin = get_user(session, "admin")
    token, _ = store.open(user_id=admin.id, username="admin", password_hash=admin.password_hash)
    return token


def test_only_a_digest_of_the_token_is_stored(api: ApiHarness) -> None:
    token = _open(api, SessionStore(api.database))
    with api.database.session() as session:
        row = session.scalars(select(ConsoleSessionRow)).one()
        stored = [str(getattr(row, column.key)) for column in ConsoleSessionRow.__table__.columns]
    assert all(token not in value for value in stored)
    assert len(row.token_digest) == 64


def test_a_session_ends_after_its_idle_time_but_each_request_restarts_that_clock(api: ApiHarness) -> None:
    clock = WallClock()
    store = _store(api.database, clock, idle_seconds=600, lifetime_seconds=3600)
    token = _open(api, store)
    for _ in range(5):  # 5 × 500 s of use: never 600 s idle
        clock.now_s += 500
        assert store.find(token) is not None
    clock.now_s += 601
    assert store.find(token) is None
    with api.database.session() as session:
        assert session.scalars(select(ConsoleSessionRow)).all() == []  # the expired row is gone


def test_a_session_ends_after_its_lifetime_however_busy(api: ApiHarness) -> None:
    clock = WallClock()
    store = _store(api.database, clock, idle_seconds=600, lifetime_seconds=3600)
    token = _open(api, store)
    while clock.now_s < START_S + 3500:
        clock.now_s += 300
        assert store.find(token) is not None
    clock.now_s += 200
    assert store.find(token) is None


def test_a_session_survives_a_restart(api: ApiHarness) -> None:
    token = _open(api, SessionStore(api.database))
    reopened = Database.open(str(api.database.engine.url.render_as_string(hide_password=False)))
    try:
        found = SessionStore(reopened).find(token)
    finally:
        reopened.close()
    assert found is not None and found.username == "admin"


def test_the_rest_api_takes_the_session_cookie_until_an_admin_revokes_it(api: ApiHarness) -> None:
    store = SessionStore(api.database)
    token = _open(api, store)
    other = _open(api, store)
    api.anonymous.cookies.set(SESSION_COOKIE, token)
    assert api.anonymous.get("/api/v1/system").status_code == 200
    listed = api.client.get("/api/v1/sessions", params={"username": "admin"}).json()
    assert [entry["username"] for entry in listed] == ["admin", "admin"]
    assert "token" not in str(listed) and "csrf" not in str(listed)
    first = min(entry["id"] for entry in listed)
    assert api.client.delete(f"/api/v1/sessions/{first}").status_code == 204
    refused = api.anonymous.get("/api/v1/system")
    assert refused.status_code == 401
    assert_error(refused.json(), "session_expired", "revoked")
    assert store.find(other) is not None
    missing = api.client.delete(f"/api/v1/sessions/{first}")
    assert missing.status_code == 404
    assert_error(missing.json(), "not_found", f"no session {first}")


def test_an_admin_ends_every_session_of_a_user(api: ApiHarness) -> None:
    store = SessionStore(api.database)
    tokens = [_open(api, store) for _ in range(3)]
    response = api.client.delete("/api/v1/sessions", params={"username": "admin"})
    assert response.json() == {"revoked": 3}
    assert [store.find(token) for token in tokens] == [None, None, None]
    unknown = api.client.delete("/api/v1/sessions", params={"username": "nobody"})
    assert unknown.status_code == 404
    assert_error(unknown.json(), "not_found", "'nobody'")


def test_opening_more_than_the_maximum_ends_the_least_recently_used(api: ApiHarness) -> None:
    clock = WallClock()
    store = SessionStore(api.database, SessionOptions(maximum_per_user=3), clock)
    tokens = []
    for _ in range(4):
        clock.now_s += 1
        tokens.append(_open(api, store))
    assert store.find(tokens[0]) is None
    assert all(store.find(token) is not None for token in tokens[1:])


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"MODELYARD_SESSION_IDLE_S": "soon"}, "MODELYARD_SESSION_IDLE_S='soon' is not a whole number"),
        ({"MODELYARD_SESSION_LIFETIME_S": "5"}, "MODELYARD_SESSION_LIFETIME_S='5' is not a whole number"),
        (
            {"MODELYARD_SESSION_IDLE_S": "7200", "MODELYARD_SESSION_LIFETIME_S": "3600"},
            "MODELYARD_SESSION_IDLE_S=7200 is longer than MODELYARD_SESSION_LIFETIME_S=3600",
        ),
    ],
)
def test_bad_session_settings_are_named(environment: dict[str, str], message: str) -> None:
    from modelyard.errors import InvalidInput

    with pytest.raises(InvalidInput) as raised:
        SessionOptions.from_environment(environment)
    assert message in raised.value.message


def test_session_settings_are_read_from_the_environment() -> None:
    options = SessionOptions.from_environment(
        {"MODELYARD_SESSION_IDLE_S": "900", "MODELYARD_SESSION_LIFETIME_S": "86_400"}
    )
    assert (options.idle_seconds, options.lifetime_seconds) == (900.0, 86400.0)
