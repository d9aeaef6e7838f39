"""Revision 0008 on a database written before it: a model pulled with a file its hub gave no hash
for becomes ``unverified`` (it was ``valid``), every row stays, and the manifest says how each
file was checked. On a SQLite file and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from modelyard.services.model_files import model_to_json
from modelyard.store.database import Database, create_database_engine
from modelyard.store.tables import ModelFile
from modelyard.testing.migrations import migrate_to

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SHA = "a" * 64
BLOB = "b" * 40


def _model(name: str, source: str, files: list[str]) -> dict[str, Any]:
    manifest = {
        "format": "modelyard-model-manifest/1",
        "source": f"hf://org/{name}@{'c' * 40}",
        "facts": {},
        "size_bytes": 10 * len(files),
        "files": [{"path": path, "size": 10, "sha256": SHA} for path in files],
    }
    return {
        "name": name,
        "source": source,
        "path": f"/models/{name}",
        "state": "valid",
        "reasons": [],
        "details": {"manifest": manifest, "architecture": "Qwen3ForCausalLM"},
        "created_at": NOW,
        "updated_at": NOW,
    }


def _task(name: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "pull",
        "model_name": name,
        "state": "completed",
        "reason": "14 files, every SHA-256 checked",
        "source": f"hf://org/{name}",
        "target_path": f"/models/{name}",
        "options": {},
        "files": entries,
        "total_bytes": 10 * len(entries),
        "done_bytes": 10 * len(entries),
        "cancel_requested": False,
        "run_count": 1,
        "created_at": NOW,
        "updated_at": NOW,
    }


def test_a_model_pulled_with_a_hashless_file_becomes_unverified_and_no_row_is_lost(database_url: str) -> None:
    migrate_to(database_url, "0007")
    engine = create_database_engine(database_url)
    metadata = sa.MetaData()
    models = sa.Table("model_files", metadata, autoload_with=engine)
    tasks = sa.Table("model_tasks", metadata, autoload_with=engine)
    with engine.begin() as connection:
        connection.execute(
            models.insert(),
            [
                _model("mirrored", "huggingface", ["config.json", "model.safetensors", "README.md"]),
                _model("clean", "huggingface", ["config.json", "model.safetensors"]),
                _model("local", "local", ["config.json"]),
            ],
        )
        connection.execute(
            tasks.insert(),
            [
                _task(
                    "mirrored",
                    [
                        {"path": "config.json", "size": 10, "sha256": None, "git_blob_id": BLOB},
                        {"path": "model.safetensors", "size": 10, "sha256": None, "git_blob_id": None},
                        {"path": "README.md", "size": 10, "sha256": None, "git_blob_id": BLOB},
                    ],
                ),
                _task(
                    "clean",
                    [
                        {"path": "config.json", "size": 10, "sha256": None, "git_blob_id": BLOB},
                        {"path": "model.safetensors", "size": 10, "sha256": SHA, "git_blob_id": None},
                    ],
                ),
            ],
        )
    engine.dispose()

    database = Database.open(database_url)
    try:
        with database.session() as session:
            rows = {row.name: row for row in session.scalars(sa.select(ModelFile))}
            assert sorted(rows) == ["clean", "local", "mirrored"]
            mirrored = model_to_json(rows["mirrored"])
            assert mirrored["state"] == "unverified"
            assert mirrored["reasons"] == [
                "1 file not checked by any hash, the hub gave none (a flipped byte would not be seen): "
                "model.safetensors"
            ]
            assert mirrored["verification"]["summary"] == (
                "2 files checked by git blob id, 1 not checked: no hash given by the hub, only the size "
                "(model.safetensors)"
            )
            checks = [entry["check"] for entry in mirrored["details"]["manifest"]["files"]]
            assert checks == ["git-blob-id", "size", "git-blob-id"]
            assert mirrored["details"]["architecture"] == "Qwen3ForCausalLM"
            clean = model_to_json(rows["clean"])
            assert clean["state"] == "valid" and clean["verification"]["verified"] is True
            local = model_to_json(rows["local"])
            assert local["state"] == "valid" and local["verification"] is None
    finally:
        database.close()
