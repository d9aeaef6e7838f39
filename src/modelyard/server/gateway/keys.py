"""API key checks for the gateway: a small in-memory cache in front of ``api_keys``.

A bearer key is hashed (SHA-256, as stored) and looked up in the database only on a cache miss,
in a worker thread; concurrent misses for one key share one lookup. Known keys are cached for
``known_ttl_s``, unknown ones for ``unknown_ttl_s`` (so a flood of bad keys cannot reach the
database on every request). The REST API calls ``invalidate()`` after creating or revoking a key,
creating or removing a deployment, or changing a project's members, which takes effect on the
next request.

A key reaches only the deployments of its project (``KeyFacts.reaches``; the gateway answers 403
``model_not_in_project`` for another project's), the console's own key every project's, and a
member's playground key those of the member's projects (``ApiKey.reach``).

``last_used_at`` is kept in memory and written every ``last_used_interval_s`` and at ``close()``,
never on the request path.

Usage::

    keys = KeyCache(database)
    keys.start()
    facts = await keys.resolve("my-...")   # None: unknown key
    keys.invalidate()
    await keys.close()
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TypedDict

from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from modelyard.server.gateway.limits import KeyLimits
from modelyard.server.gateway.project_limits import ProjectLimits
from modelyard.services.key_hashing import hash_key
from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, Deployment, Project, ProjectMember

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyFacts:
    """What the gateway needs to know about one API key."""

    id: int
    name: str
    # None: every deployment.
    allowed_deployments: frozenset[str] | None
    revoked: bool
    limits: KeyLimits = field(default_factory=KeyLimits)
    # The key's project's quotas (``project_limits.py``); None: a project without any.
    project: ProjectLimits | None = None
    # The projects whose deployments the key reaches (its own; a member's playground key: the
    # member's), named in the 403 ``model_not_in_project``.
    project_names: tuple[str, ...] = ()
    # The deployments of every other project, which the key may not reach (none for the
    # console's own key). Read with the key; a deployment made or removed drops the cache.
    foreign_deployments: frozenset[str] = frozenset()

    def reaches(self, deployment_name: str) -> bool:
        """Whether ``deployment_name`` is not another project's than the key's."""
        return deployment_name not in self.foreign_deployments

    def may_use(self, deployment_name: str) -> bool:
        allowed = self.allowed_deployments is None or deployment_name in self.allowed_deployments
        return allowed and self.reaches(deployment_name)


class _Reach(TypedDict):
    project_names: tuple[str, ...]
    foreign_deployments: frozenset[str]


def _reach(session: Session, record: ApiKey) -> _Reach:
    """The projects and deployments ``record`` reaches (``ApiKey.reach``)."""
    if record.reach == "every_project":
        return {"project_names": (), "foreign_deployments": frozenset()}
    if record.reach == "member_projects":
        project_ids = list(
            session.scalars(select(ProjectMember.project_id).where(ProjectMember.user_id == record.owner_id))
        )
    else:
        project_ids = [record.project_id]
    names = session.scalars(select(Project.name).where(Project.id.in_(project_ids)).order_by(Project.name))
    foreign = session.scalars(select(Deployment.name).where(Deployment.project_id.not_in(project_ids)))
    return {"project_names": tuple(names), "foreign_deployments": frozenset(foreign)}


class Missing(enum.Enum):
    """No fresh answer in the cache."""

    MISSING = "missing"


MISSING = Missing.MISSING


@dataclass(frozen=True, slots=True)
class _Entry:
    facts: KeyFacts | None
    expires_at: float


class KeyCache:
    """Resolves bearer keys to ``KeyFacts``; implements the context's ``KeyCacheHandle``."""

    def __init__(
        self,
        database: Database,
        *,
        known_ttl_s: float = 30.0,
        unknown_ttl_s: float = 5.0,
        last_used_interval_s: float = 60.0,
        max_entries: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._database = database
        self._known_ttl_s = known_ttl_s
        self._unknown_ttl_s = unknown_ttl_s
        self._last_used_interval_s = last_used_interval_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lookups: dict[str, asyncio.Future[KeyFacts | None]] = {}
        # Bumped by invalidate(): a lookup that started before it must not fill the cache.
        self._generation = 0
        self._last_used: dict[int, float] = {}
        self._flush_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start writing ``last_used_at`` periodically (call inside the running event loop)."""
        if self._flush_task is None:
            self._flush_task = asyncio.get_running_loop().create_task(
                self._flush_periodically(), name="key-last-used"
            )

    async def close(self) -> None:
        if self._flush_task is not None:
            self._flush_task.cancel()
            await asyncio.gather(self._flush_task, return_exceptions=True)
            self._flush_task = None
        await self.flush_last_used()

    def invalidate(self) -> None:
        """Forget every cached answer: keys were created, revoked or changed."""
        self._generation += 1
        self._entries.clear()
        self._lookups.clear()

    def cached(self, key: str) -> KeyFacts | Missing | None:
        """The cached answer for ``key`` without waiting (``MISSING``: ask ``resolve``)."""
        entry = self._entries.get(hash_key(key))
        if entry is None or entry.expires_at <= self._clock():
            return MISSING
        facts = entry.facts
        if facts is not None and not facts.revoked:
            self._last_used[facts.id] = time.time()
        return facts

    def reading(self, key: str) -> bool:
        """Whether a database read for ``key`` is under way (``resolve`` would join it)."""
        return hash_key(key) in self._lookups

    async def resolve(self, key: str) -> KeyFacts | None:
        """The facts of ``key`` (``revoked`` may be True), or None for a key that does not exist."""
        key_hash = hash_key(key)
        entry = self._entries.get(key_hash)
        if entry is None or entry.expires_at <= self._clock():
            facts = await self._lookup(key_hash)
        else:
            facts = entry.facts
        if facts is not None and not facts.revoked:
            self._last_used[facts.id] = time.time()
        return facts

    async def _lookup(self, key_hash: str) -> KeyFacts | None:
        # One database read per key however many requests wait for it; a waiter that goes away
        # (client disconnected) does not cancel the read the others wait on.
        lookup = self._lookups.get(key_hash)
        if lookup is None:
            lookup = asyncio.ensure_future(asyncio.to_thread(self._read, key_hash))
            self._lookups[key_hash] = lookup
            lookup.add_done_callback(partial(self._remember, key_hash, self._generation))
        return await asyncio.shield(lookup)

    def _remember(self, key_hash: str, generation: int, lookup: asyncio.Future[KeyFacts | None]) -> None:
        if self._lookups.get(key_hash) is lookup:
            del self._lookups[key_hash]
        if lookup.cancelled() or lookup.exception() is not None or generation != self._generation:
            return
        facts = lookup.result()
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        ttl_s = self._unknown_ttl_s if facts is None else self._known_ttl_s
        self._entries[key_hash] = _Entry(facts, self._clock() + ttl_s)

    def _read(self, key_hash: str) -> KeyFacts | None:
        with self._database.session() as session:
            record = session.scalar(select(ApiKey).where(ApiKey.key_hash == key_hash))
            if record is None:
                return None
            allowed = record.allowed_deployments
            project = record.project
            quotas = ProjectLimits(
                project_id=project.id,
                name=project.name,
                tokens_per_day=project.tokens_per_day,
                tokens_per_month=project.tokens_per_month,
                max_concurrent_requests=project.max_concurrent_requests,
            )
            return KeyFacts(
                id=record.id,
                name=record.name,
                allowed_deployments=None if allowed is None else frozenset(allowed),
                revoked=record.revoked_at is not None,
                limits=KeyLimits(
                    requests_per_minute=record.requests_per_minute,
                    tokens_per_minute=record.tokens_per_minute,
                    max_concurrent_requests=record.max_concurrent_requests,
                    token_quota=record.token_quota,
                    quota_period="month" if record.quota_period == "month" else "day",
                ),
                project=quotas if quotas.any else None,
                **_reach(session, record),
            )

    async def flush_last_used(self) -> None:
        """Write the in-memory ``last_used_at`` times to ``api_keys``."""
        if not self._last_used:
            return
        used, self._last_used = self._last_used, {}
        try:
            await asyncio.to_thread(self._write_last_used, used)
        except SQLAlchemyError:
            logger.exception("could not write last_used_at of %d API keys", len(used))

    def _write_last_used(self, used: dict[int, float]) -> None:
        with self._database.session() as session:
            for key_id, used_at in used.items():
                session.execute(
                    update(ApiKey)
                    .where(ApiKey.id == key_id)
                    .values(last_used_at=datetime.fromtimestamp(used_at, UTC))
                )
            session.commit()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._last_used_interval_s)
            await self.flush_last_used()
