"""Gateway API keys: created by an admin, shown once, stored hashed, optionally limited to named
deployments, revocable. After every write the caller drops the gateway's key cache
(``context.key_cache.invalidate()``).

Usage::

    created = create_key(session, "ci", allowed_deployments=["demo"])
    print(created.key)  # the only time the key is visible
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelyard.errors import AlreadyExists, InvalidInput, NotFound
from modelyard.services.key_hashing import display_prefix, generate_key, hash_key
from modelyard.services.names import check_name, commit_new
from modelyard.store.tables import ApiKey, Deployment, Project, UsageRecord, utc_now


@dataclass(frozen=True)
class CreatedKey:
    key: str
    record: ApiKey


def key_to_json(record: ApiKey) -> dict[str, Any]:
    return {
        "name": record.name,
        "prefix": record.prefix,
        "allowed_deployments": record.allowed_deployments,
        "reach": record.reach,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
        "last_used_at": record.last_used_at.isoformat() if record.last_used_at else None,
        "active": record.revoked_at is None,
        "limits": {
            "requests_per_minute": record.requests_per_minute,
            "tokens_per_minute": record.tokens_per_minute,
            "max_concurrent_requests": record.max_concurrent_requests,
            "token_quota": record.token_quota,
            "quota_period": record.quota_period,
        },
    }


def _check_allowed(
    session: Session, allowed: list[str], project: Project | None, sees_every_project: bool
) -> list[str]:
    """``allowed`` without repeats, when every name is a deployment (of ``project``, when given:
    a key reaches only its own project's deployments, so naming another's is refused here rather
    than at each call). ``sees_every_project``: the caller may be told a name is another
    project's or no deployment at all (a member gets one answer for both)."""
    names = list(dict.fromkeys(name.strip() for name in allowed))
    if not names or "" in names:
        raise InvalidInput(
            "allowed_deployments contains an empty name",
            hint="leave it out to allow every deployment, or list deployment names",
        )
    found: dict[str, int] = {
        name: project_id
        for name, project_id in session.execute(
            select(Deployment.name, Deployment.project_id).where(Deployment.name.in_(names))
        )
    }
    missing = [name for name in names if name not in found]
    if missing and (project is None or sees_every_project):
        existing = sorted(session.scalars(select(Deployment.name)))
        raise NotFound(
            f"no deployment named {', '.join(repr(name) for name in missing)}",
            hint=f"deployments: {', '.join(existing) or 'none yet'}",
        )
    if project is None:
        return names
    outside = [name for name in names if found.get(name) != project.id]
    if outside:
        owned = sorted(session.scalars(select(Deployment.name).where(Deployment.project_id == project.id)))
        where = ""
        if sees_every_project:
            owners = {
                project_id: name for project_id, name in session.execute(select(Project.id, Project.name))
            }
            where = (
                " (" + ", ".join(f"{name!r} is in project {owners[found[name]]!r}" for name in outside) + ")"
            )
        raise InvalidInput(
            f"allowed_deployments names {', '.join(repr(name) for name in outside)}, not "
            f"{'a deployment' if len(outside) == 1 else 'deployments'} of project {project.name!r} "
            f"(the key's project): a key may use only its own project's deployments{where}",
            hint=f"project {project.name!r} has: {', '.join(owned) or 'no deployments yet'}; "
            "to use another project's deployment, make the key in that project ('project')",
        )
    return names


@dataclass(frozen=True)
class KeyLimitRequest:
    """Limits asked for a new key (None: no limit of that kind); see server/gateway/limits.py."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    token_quota: int | None = None
    # "day" or "month" (UTC calendar); a quota without one is per month.
    quota_period: str | None = None


def create_key(
    session: Session,
    name: str,
    allowed_deployments: list[str] | None = None,
    limits: KeyLimitRequest | None = None,
    project: Project | None = None,
    *,
    sees_every_project: bool = True,
) -> CreatedKey:
    """A new key in ``project`` (None: the default project), its allowed deployments checked
    against that project's (``sees_every_project``: the caller is an admin or an operator, told
    which project a named deployment is in); nothing is stored when any check fails."""
    check_name(name, "key")
    limits = limits or KeyLimitRequest()
    if limits.quota_period is not None and limits.quota_period not in ("day", "month"):
        raise InvalidInput(f"quota_period {limits.quota_period!r} is not day or month")
    if limits.quota_period is not None and limits.token_quota is None:
        raise InvalidInput("quota_period is given without token_quota", hint="give the quota in tokens too")
    if session.scalar(select(ApiKey).where(ApiKey.name == name)) is not None:
        raise AlreadyExists(
            f"a key named {name!r} already exists",
            hint=(
                f"choose another name, or replace its secret with `modelyard keys create {name} --rotate` "
                "(POST /api/v1/keys/NAME/rotate; the old secret stops working)"
            ),
        )
    allowed = (
        None
        if allowed_deployments is None
        else _check_allowed(session, allowed_deployments, project, sees_every_project)
    )
    key = generate_key()
    record = ApiKey(
        name=name,
        prefix=display_prefix(key),
        key_hash=hash_key(key),
        allowed_deployments=allowed,
        requests_per_minute=limits.requests_per_minute,
        tokens_per_minute=limits.tokens_per_minute,
        max_concurrent_requests=limits.max_concurrent_requests,
        token_quota=limits.token_quota,
        quota_period=(limits.quota_period or "month") if limits.token_quota is not None else None,
    )
    if project is not None:
        record.project_id = project.id
    session.add(record)
    commit_new(session, "key", name)
    return CreatedKey(key=key, record=record)


def quota_period_start(period: str, now: datetime) -> datetime:
    """The start of the UTC day or month that ``now`` is in (as the gateway counts quotas)."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day if period == "day" else day.replace(day=1)


def quota_use(session: Session, records: list[ApiKey], now: datetime) -> dict[int, int]:
    """Tokens (prompt + completion) each key with a quota used in its current period, by key id."""
    used: dict[int, int] = {}
    for period in ("day", "month"):
        ids = [r.id for r in records if r.token_quota is not None and r.quota_period == period]
        if not ids:
            continue
        query = (
            select(
                UsageRecord.api_key_id,
                func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens),
            )
            .where(UsageRecord.api_key_id.in_(ids), UsageRecord.at >= quota_period_start(period, now))
            .group_by(UsageRecord.api_key_id)
        )
        found = {key_id: int(total or 0) for key_id, total in session.execute(query).all()}
        used.update({key_id: found.get(key_id, 0) for key_id in ids})
    return used


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)))


def get_key(session: Session, name: str) -> ApiKey:
    record = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if record is None:
        known = [key.name for key in list_keys(session)]
        raise NotFound(f"no key named {name!r}", hint=f"keys: {', '.join(known) or 'none yet'}")
    return record


def revoke_key(session: Session, name: str) -> ApiKey:
    """Revoke a key (idempotent: revoking a revoked key keeps its first revocation time)."""
    record = get_key(session, name)
    if record.revoked_at is None:
        record.revoked_at = utc_now()
        session.commit()
    return record


def rotate_key(session: Session, name: str) -> CreatedKey:
    """Give key ``name`` a new secret (shown once); the old one stops working at once.

    The key keeps its name, its allowed deployments and its usage history; a revoked key is active
    again with the new secret.
    """
    record = get_key(session, name)
    key = generate_key()
    record.prefix = display_prefix(key)
    record.key_hash = hash_key(key)
    record.revoked_at = None
    session.commit()
    return CreatedKey(key=key, record=record)
