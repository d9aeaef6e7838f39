"""Telling a full disk apart from other failures, whichever layer reports it.

A write can fail for lack of space as an ``OSError`` (``ENOSPC``, or ``EDQUOT`` over a quota), as
SQLite's ``SQLITE_FULL`` ("database or disk is full"), or as PostgreSQL's ``disk_full``
(SQLSTATE 53100), each possibly wrapped by SQLAlchemy. The server answers all of them ``507``
with the data directory named, instead of a 500.

Usage::

    except SQLAlchemyError as error:
        if is_storage_full(error):
            ...
"""

from __future__ import annotations

import errno
import sqlite3

_SQLITE_FULL = 13
_POSTGRES_DISK_FULL = "53100"
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _causes(error: BaseException) -> list[BaseException]:
    """``error``, the driver error SQLAlchemy wraps, and what caused them (no cycles)."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending and len(seen) < 16:
        current = pending.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        original = getattr(current, "orig", None)
        pending.extend(
            [
                original if isinstance(original, BaseException) else None,
                current.__cause__,
                current.__context__,
            ]
        )
    return seen


def is_storage_full(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) says the disk or the database is full."""
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.errno in _FULL_ERRNOS:
            return True
        if isinstance(cause, sqlite3.OperationalError) and (
            getattr(cause, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(cause)
        ):
            return True
        if getattr(cause, "sqlstate", None) == _POSTGRES_DISK_FULL:
            return True
    return False
