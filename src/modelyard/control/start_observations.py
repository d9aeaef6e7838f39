"""The starts this installation has seen, in the store (``start_observations``): read for the
correction (``estimate/correction.py``), written once per engine start, reset on request.

Usage::

    observations = load_observations(database, engine="vllm", engine_version="0.25.0")
    correction = correction_for(key, observations, now=clock.now())
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from modelyard.estimate.correction import MAX_AGE_DAYS, StartKey, StartObservation
from modelyard.store.database import Database
from modelyard.store.tables import StartObservationRow

# At most this many of the newest rows are read per engine and version (the rule reads eight per key).
READ_LIMIT_ROWS = 2000


def observation_of(row: StartObservationRow) -> StartObservation:
    return StartObservation(
        key=StartKey(
            engine=row.engine,
            engine_version=row.engine_version,
            gpu_model=row.gpu_model,
            architecture=row.architecture,
            memory_fraction=row.memory_fraction,
            context_tokens=row.context_tokens,
            enforce_eager=row.enforce_eager,
            kv_dtype=row.kv_dtype,
            tensor_parallel=row.tensor_parallel,
        ),
        observed_at=row.observed_at,
        predicted_kv_bytes=row.predicted_kv_bytes,
        predicted_kv_tokens=row.predicted_kv_tokens,
        shown_kv_tokens=row.shown_kv_tokens,
        logged_kv_bytes=row.logged_kv_bytes,
        logged_kv_tokens=row.logged_kv_tokens,
    )


def load_observations(
    database: Database, *, engine: str, engine_version: str, now: datetime
) -> list[StartObservation]:
    """The starts of one engine version of the last ``MAX_AGE_DAYS`` days, oldest first."""
    with database.session() as session:
        return read_observations(session, engine=engine, engine_version=engine_version, now=now)


def read_observations(
    session: Session, *, engine: str, engine_version: str, now: datetime
) -> list[StartObservation]:
    """``load_observations`` in a session the caller holds."""
    rows = session.scalars(
        select(StartObservationRow)
        .where(
            StartObservationRow.engine == engine,
            StartObservationRow.engine_version == engine_version,
            StartObservationRow.observed_at >= now - timedelta(days=MAX_AGE_DAYS),
        )
        .order_by(StartObservationRow.observed_at.desc(), StartObservationRow.id.desc())
        .limit(READ_LIMIT_ROWS)
    )
    return [observation_of(row) for row in reversed(list(rows))]


def add_observation(database: Database, row: StartObservationRow) -> bool:
    """Record a start once: False when that start of that instance is recorded already (an
    engine re-adopted, or verified again, reaches running again)."""
    with database.session() as session:
        recorded = session.scalar(
            select(StartObservationRow.id).where(
                StartObservationRow.instance_uid == row.instance_uid,
                StartObservationRow.start_number == row.start_number,
            )
        )
        if recorded is not None:
            return False
        session.add(row)
        session.commit()
        return True


def row_to_json(row: StartObservationRow) -> dict[str, Any]:
    """A start as ``GET /api/v1/start-observations`` lists it."""
    return {
        column.name: (
            getattr(row, column.name).isoformat()
            if column.name == "observed_at"
            else getattr(row, column.name)
        )
        for column in StartObservationRow.__table__.columns
    }


def list_observation_rows(
    database: Database, *, engine: str | None = None, engine_version: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    with database.session() as session:
        query = select(StartObservationRow)
        if engine:
            query = query.where(StartObservationRow.engine == engine)
        if engine_version:
            query = query.where(StartObservationRow.engine_version == engine_version)
        rows = session.scalars(query.order_by(StartObservationRow.id.desc()).limit(limit))
        return [row_to_json(row) for row in reversed(list(rows))]


def reset_observations(database: Database, *, engine: str | None = None, gpu_model: str | None = None) -> int:
    """Forget the starts (of one engine, one GPU model, or all): the correction starts over."""
    with database.session() as session:
        query = select(StartObservationRow.id)
        if engine:
            query = query.where(StartObservationRow.engine == engine)
        if gpu_model:
            query = query.where(StartObservationRow.gpu_model == gpu_model)
        ids = list(session.scalars(query))
        if ids:
            session.execute(delete(StartObservationRow).where(StartObservationRow.id.in_(ids)))
        session.commit()
        return len(ids)


def latest_shortfalls(database: Database) -> list[tuple[str, int, int, int]]:
    """Per booked start that is some instance's current one: (deployment, replica, booked tokens,
    logged tokens), for ``modelyard_kv_booking_shortfall_tokens``."""
    from modelyard.store.tables import Instance

    with database.session() as session:
        rows = session.execute(
            select(StartObservationRow)
            .join(
                Instance,
                (Instance.uid == StartObservationRow.instance_uid)
                & (Instance.start_count == StartObservationRow.start_number),
            )
            .where(StartObservationRow.booked_kv_tokens.is_not(None))
        ).scalars()
        return [
            (row.deployment_name, row.replica_index, int(row.booked_kv_tokens or 0), row.logged_kv_tokens)
            for row in rows
        ]
