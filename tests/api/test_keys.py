"""API keys: shown once, stored hashed, limited to deployments, revocable."""

from __future__ import annotations

from sqlalchemy import select

from modelyard.services.key_hashing import hash_key
from modelyard.store.tables import ApiKey

from .conftest import ApiHarness, assert_error


def test_created_key_is_returned_once_and_stored_hashed(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/keys", json={"name": "ci"})
    assert response.status_code == 201
    key = response.json()["key"]
    assert key.startswith("my-")
    with api.database.session() as session:
        record = session.scalar(select(ApiKey).where(ApiKey.name == "ci"))
        assert record is not None
        assert record.key_hash == hash_key(key)
        assert key not in (record.prefix, record.key_hash)
    listing = api.client.get("/api/v1/keys").json()
    assert [item["name"] for item in listing] == ["ci"]
    assert "key" not in listing[0]
    assert listing[0]["prefix"] == key[:8]
    assert api.key_cache.invalidations == 1


def test_duplicate_key_name_is_409_and_stores_nothing_new(api: ApiHarness) -> None:
    api.client.post("/api/v1/keys", json={"name": "ci"})
    response = api.client.post("/api/v1/keys", json={"name": "ci"})
    assert response.status_code == 409
    with api.database.session() as session:
        assert len(session.scalars(select(ApiKey)).all()) == 1


def test_key_limited_to_unknown_deployment_is_refused(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/keys", json={"name": "ci", "allowed_deployments": ["ghost"]})
    assert response.status_code == 404
    assert_error(response.json(), "not_found", "'ghost'")
    with api.database.session() as session:
        assert session.scalars(select(ApiKey)).all() == []


def test_bad_key_name_is_400(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/keys", json={"name": "has space"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "' '")


def test_revoke_marks_the_key_and_drops_the_cache(api: ApiHarness) -> None:
    api.client.post("/api/v1/keys", json={"name": "ci"})
    response = api.client.delete("/api/v1/keys/ci")
    assert response.status_code == 200
    assert response.json()["active"] is False
    assert api.key_cache.invalidations == 2
    assert api.client.get("/api/v1/keys").json()[0]["revoked_at"] is not None


def test_revoke_unknown_key_is_404(api: ApiHarness) -> None:
    response = api.client.delete("/api/v1/keys/ghost")
    assert response.status_code == 404


def test_a_name_taken_by_a_concurrent_request_is_409_not_500(api: ApiHarness) -> None:
    import pytest

    from modelyard.errors import AlreadyExists
    from modelyard.services.names import commit_new

    api.client.post("/api/v1/keys", json={"name": "ci"})
    with api.database.session() as session:
        # What a second request that passed the name check at the same moment would write.
        session.add(ApiKey(name="ci", prefix="my-xxxxx", key_hash="2" * 64))
        with pytest.raises(AlreadyExists, match="'ci'"):
            commit_new(session, "key", "ci")
    with api.database.session() as session:
        assert len(session.scalars(select(ApiKey)).all()) == 1


def test_rotate_gives_a_new_secret_and_the_old_one_stops_matching(api: ApiHarness) -> None:
    old = api.client.post("/api/v1/keys", json={"name": "ci"}).json()["key"]
    api.client.delete("/api/v1/keys/ci")
    response = api.client.post("/api/v1/keys/ci/rotate")
    assert response.status_code == 200
    new = response.json()["key"]
    assert new != old and response.json()["active"] is True
    with api.database.session() as session:
        [record] = session.scalars(select(ApiKey)).all()
    assert record.key_hash == hash_key(new) != hash_key(old)
    assert record.prefix == new[:8]
    assert api.key_cache.invalidations == 3  # create, revoke, rotate: the gateway forgets the old one


def test_rotate_of_an_unknown_key_is_404(api: ApiHarness) -> None:
    assert api.client.post("/api/v1/keys/ghost/rotate").status_code == 404
