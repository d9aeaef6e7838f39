"""Admin authentication and the bootstrap password."""

from __future__ import annotations

import stat
from pathlib import Path

from sqlalchemy import select

from modelyard.services.password_hashing import verify_password
from modelyard.services.users import ensure_admin
from modelyard.store.database import Database
from modelyard.store.tables import User

from .conftest import ApiHarness, assert_error


def test_no_credentials_is_401_in_the_error_shape(api: ApiHarness) -> None:
    response = api.anonymous.get("/api/v1/system")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic")
    assert_error(response.json(), "unauthorized", "admin")


def test_wrong_password_is_401(api: ApiHarness) -> None:
    response = api.anonymous.get("/api/v1/system", auth=("admin", "not-the-password"))
    assert response.status_code == 401
    assert_error(response.json(), "unauthorized", "wrong username or password")


def test_unknown_user_is_401(api: ApiHarness) -> None:
    response = api.anonymous.get("/api/v1/system", auth=("root", api.password))
    assert response.status_code == 401


def test_first_start_creates_admin_with_a_private_password_file(tmp_path: Path, database_url: str) -> None:
    database = Database.open(database_url)
    password_file = tmp_path / "data" / "admin-password"
    try:
        password = ensure_admin(database, password_file)
        assert password is not None and len(password) >= 20
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        assert password_file.read_text().strip() == password
        with database.session() as session:
            user = session.scalars(select(User)).one()
        assert user.username == "admin" and password not in user.password_hash
        assert verify_password(password, user.password_hash)
    finally:
        database.close()


def test_the_password_file_lets_the_admin_in(api: ApiHarness) -> None:
    password = api.context.settings.admin_password_file.read_text().strip()
    assert api.anonymous.get("/api/v1/system", auth=("admin", password)).status_code == 200


def test_ensure_admin_returns_none_when_admin_exists(api: ApiHarness) -> None:
    assert ensure_admin(api.database, api.context.settings.admin_password_file) is None
    with api.database.session() as session:
        assert session.query(User).count() == 1


def test_password_change_rewrites_file_and_old_password_stops_working(api: ApiHarness) -> None:
    response = api.client.put(
        "/api/v1/auth/password",
        json={"current_password": api.password, "new_password": "a-new-password-123"},
    )
    assert response.status_code == 204, response.text
    assert api.context.settings.admin_password_file.read_text().strip() == "a-new-password-123"
    assert api.anonymous.get("/api/v1/system", auth=("admin", api.password)).status_code == 401
    assert api.anonymous.get("/api/v1/system", auth=("admin", "a-new-password-123")).status_code == 200


def test_password_change_with_wrong_current_password_changes_nothing(api: ApiHarness) -> None:
    response = api.client.put(
        "/api/v1/auth/password", json={"current_password": "nope", "new_password": "a-new-password-123"}
    )
    assert response.status_code == 401
    assert api.context.settings.admin_password_file.read_text().strip() == api.password
    assert api.client.get("/api/v1/system").status_code == 200


def test_too_short_new_password_is_refused(api: ApiHarness) -> None:
    response = api.client.put(
        "/api/v1/auth/password", json={"current_password": api.password, "new_password": "short"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "at least 12")


def test_login_cache_remembers_a_login_until_the_password_changes() -> None:
    from modelyard.server.auth import VerifiedLoginCache

    cache = VerifiedLoginCache(ttl_seconds=60)
    before = VerifiedLoginCache.fingerprint("admin", "secret", "scrypt$old")
    cache.add(before)
    assert cache.contains(before)
    assert not cache.contains(VerifiedLoginCache.fingerprint("admin", "secret", "scrypt$new"))
    assert not cache.contains(VerifiedLoginCache.fingerprint("admin", "guess", "scrypt$old"))


def test_login_cache_forgets_after_its_lifetime() -> None:
    from modelyard.server.auth import VerifiedLoginCache

    cache = VerifiedLoginCache(ttl_seconds=-1)  # already expired when added
    fingerprint = VerifiedLoginCache.fingerprint("admin", "secret", "scrypt$old")
    cache.add(fingerprint)
    assert not cache.contains(fingerprint)
