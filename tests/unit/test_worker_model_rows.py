"""What the survey of the workers writes (``services/worker_models.record_survey``), on a real
SQLite file: a copy a push verified stays ``verified`` while its files are unchanged, becomes
``present`` when they change, and ``copying`` lasts only while a push task for it is live."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from modelyard.downloads.push_runner import mark_copy
from modelyard.services.worker_models import record_survey
from modelyard.store.database import Database
from modelyard.store.tables import ModelFile, ModelTask, WorkerModel


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    with database.session() as session:
        session.add(ModelFile(name="qwen", path="/models/qwen", state="valid"))
        session.commit()
    try:
        yield database
    finally:
        database.close()


def _model(database: Database) -> list[dict[str, Any]]:
    with database.session() as session:
        record = session.scalar(select(ModelFile))
        assert record is not None
        return [{"id": record.id, "name": record.name, "path": record.path, "files": None}]


def _survey(database: Database, state: str, fingerprint: str | None = None) -> WorkerModel:
    models = _model(database)
    answer: dict[str, Any] = {"state": state, "reason": "", "problems": [], "fingerprint": fingerprint}
    with database.session() as session:
        record_survey(session, "gpu-2", models, {"qwen": answer})
        row = session.scalars(select(WorkerModel)).one()
        session.expunge(row)
    return row


def test_a_verified_copy_stays_verified_until_its_files_change(database: Database) -> None:
    model_id = _model(database)[0]["id"]
    with database.session() as session:
        mark_copy(session, model_id, "gpu-2", "verified", "checked by push 1", verified_fingerprint="print-1")
    assert _survey(database, "present", "print-1").state == "verified"
    changed = _survey(database, "present", "print-2")
    assert changed.state == "present" and changed.verified_at is None
    assert _survey(database, "present", "print-1").state == "present"  # verified again only by a push


def test_copying_lasts_only_while_a_push_task_is_live(database: Database) -> None:
    model_id = _model(database)[0]["id"]
    with database.session() as session:
        mark_copy(session, model_id, "gpu-2", "copying", "push task 1 is copying it")
        session.add(
            ModelTask(
                kind="push",
                model_name="qwen",
                source="/models/qwen",
                target_path="/models/qwen",
                options={"worker": "gpu-2"},
                state="running",
            )
        )
        session.commit()
    assert _survey(database, "incomplete").state == "copying"
    with database.session() as session:
        task = session.scalar(select(ModelTask))
        assert task is not None
        task.state = "cancelled"
        session.commit()
    assert _survey(database, "incomplete").state == "incomplete"


def test_a_missing_copy_is_recorded_with_its_reason(database: Database) -> None:
    models = _model(database)
    answer = {"state": "missing", "reason": "/models/qwen does not exist on this worker", "problems": []}
    with database.session() as session:
        record_survey(session, "gpu-3", models, {"qwen": answer})
        [row] = session.scalars(select(WorkerModel)).all()
    assert (row.worker, row.state, row.reason) == (
        "gpu-3",
        "missing",
        "/models/qwen does not exist on this worker",
    )
