"""KeyCache over a real SQLite file: lookups, caching, invalidation, last_used_at."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from modelyard.server.gateway.keys import KeyCache
from modelyard.services.key_hashing import display_prefix, generate_key, hash_key
from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, utc_now


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return Database.open("sqlite:///" + str(tmp_path / "keys.db"))


def add_key(database: Database, name: str, allowed: list[str] | None = None) -> str:
    key = generate_key()
    with database.session() as session:
        session.add(
            ApiKey(name=name, prefix=display_prefix(key), key_hash=hash_key(key), allowed_deployments=allowed)
        )
        session.commit()
    return key


def revoke(database: Database, name: str) -> None:
    with database.session() as session:
        record = session.query(ApiKey).filter_by(name=name).one()
        record.revoked_at = utc_now()
        session.commit()


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


async def test_a_key_resolves_to_its_facts(database: Database) -> None:
    key = add_key(database, "ci", ["demo"])
    facts = await KeyCache(database).resolve(key)
    assert facts is not None
    assert (facts.name, facts.revoked) == ("ci", False)
    assert facts.may_use("demo") and not facts.may_use("other")


async def test_an_unknown_key_resolves_to_none(database: Database) -> None:
    assert await KeyCache(database).resolve("my-not-a-key") is None


async def test_revocation_takes_effect_after_invalidate(database: Database) -> None:
    key = add_key(database, "ci")
    cache = KeyCache(database)
    assert (await cache.resolve(key)) is not None
    revoke(database, "ci")
    still_cached = await cache.resolve(key)
    assert still_cached is not None and not still_cached.revoked
    cache.invalidate()
    facts = await cache.resolve(key)
    assert facts is not None and facts.revoked


async def test_a_new_key_works_after_invalidate_despite_the_negative_cache(database: Database) -> None:
    cache = KeyCache(database)
    key = generate_key()
    assert await cache.resolve(key) is None
    with database.session() as session:
        session.add(ApiKey(name="late", prefix=display_prefix(key), key_hash=hash_key(key)))
        session.commit()
    cache.invalidate()
    assert await cache.resolve(key) is not None


async def test_cached_answers_expire(database: Database) -> None:
    clock = Clock()
    key = add_key(database, "ci")
    cache = KeyCache(database, known_ttl_s=30, clock=clock)
    await cache.resolve(key)
    revoke(database, "ci")
    clock.now_s += 31
    facts = await cache.resolve(key)
    assert facts is not None and facts.revoked


async def test_concurrent_lookups_of_one_key_agree(database: Database) -> None:
    key = add_key(database, "ci")
    cache = KeyCache(database)
    results = await asyncio.gather(*(cache.resolve(key) for _ in range(20)))
    assert {facts.name for facts in results if facts is not None} == {"ci"}
    assert all(facts is not None for facts in results)


async def test_last_used_at_is_written_on_flush_not_per_request(database: Database) -> None:
    key = add_key(database, "ci")
    cache = KeyCache(database)
    await cache.resolve(key)
    with database.session() as session:
        assert session.query(ApiKey).filter_by(name="ci").one().last_used_at is None
    await cache.close()
    with database.session() as session:
        assert session.query(ApiKey).filter_by(name="ci").one().last_used_at is not None
