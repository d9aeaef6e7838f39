"""model files: how each pulled file was checked; a pulled model with a file no hash checked is unverified

Pulls before this revision accepted a file the hub gave no hash for (checked by size only) and
called the model ``valid``. Their task rows still say what the hub gave for every file (``sha256``,
``git_blob_id``, or neither), so this revision records, in each pulled model's manifest, how every
file was checked (``check``: ``sha256`` / ``git-blob-id`` / ``size``), adds the model's
``details["verification"]``, and turns a ``valid`` model with a size-only file ``unverified``, with
the files in its reasons. Every row is kept; models that were not pulled (local directories,
imported bundles, whose manifests never said) are left as they are.

Self-contained on purpose: it does not import ``modelyard.hub.verification``, whose words may
change after this revision.

Revision ID: 0008_verification
Revises: 0007
Create Date: 2026-12-06 19:40:00
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008_verification"
down_revision = "0007"
branch_labels = None
depends_on = None

SHOWN_FILES = 6

model_files = sa.table(
    "model_files",
    sa.column("id", sa.Integer()),
    sa.column("name", sa.String()),
    sa.column("source", sa.String()),
    sa.column("state", sa.String()),
    sa.column("reasons", sa.JSON()),
    sa.column("details", sa.JSON()),
)
model_tasks = sa.table(
    "model_tasks",
    sa.column("id", sa.Integer()),
    sa.column("kind", sa.String()),
    sa.column("model_name", sa.String()),
    sa.column("files", sa.JSON()),
)


def _check(entry: dict[str, Any]) -> str:
    if entry.get("sha256"):
        return "sha256"
    return "git-blob-id" if entry.get("git_blob_id") else "size"


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def _shown(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN_FILES])
    return shown + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES else "")


def _verification(checks: dict[str, str]) -> dict[str, Any]:
    counts = {
        kind: sum(1 for check in checks.values() if check == kind) for kind in ("sha256", "git-blob-id")
    }
    unverified = sorted(path for path, check in checks.items() if check == "size")
    parts: list[str] = []
    for kind, label in (("sha256", "SHA-256"), ("git-blob-id", "git blob id")):
        if counts[kind]:
            parts.append(
                f"{counts[kind] if parts else _files(counts[kind])} {'' if parts else 'checked '}by {label}"
            )
    if unverified:
        shown = str(len(unverified)) if parts else _files(len(unverified))
        parts.append(f"{shown} not checked: no hash given by the hub, only the size ({_shown(unverified)})")
    return {
        "verified": not unverified,
        "sha256_files": counts["sha256"],
        "git_blob_id_files": counts["git-blob-id"],
        "size_only_files": len(unverified),
        "unverified_files": unverified,
        "summary": ", ".join(parts) if parts else "no files",
    }


def upgrade() -> None:
    connection = op.get_bind()
    pulled = connection.execute(
        sa.select(model_files).where(model_files.c.source.in_(("huggingface", "modelscope")))
    ).all()
    for model in pulled:
        details = dict(model.details or {})
        manifest = details.get("manifest")
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
            continue
        task_files = connection.execute(
            sa.select(model_tasks.c.files)
            .where(model_tasks.c.model_name == model.name, model_tasks.c.kind == "pull")
            .order_by(model_tasks.c.id.desc())
            .limit(1)
        ).scalar()
        listed = {str(entry.get("path")): entry for entry in task_files or [] if isinstance(entry, dict)}
        if any(str(entry.get("path")) not in listed for entry in manifest["files"]):
            continue  # the task that filled it is gone: what the hub gave is not known
        checks = {str(entry["path"]): _check(listed[str(entry["path"])]) for entry in manifest["files"]}
        manifest = {
            **manifest,
            "files": [{**entry, "check": checks[str(entry["path"])]} for entry in manifest["files"]],
        }
        verification = _verification(checks)
        details = {**details, "manifest": manifest, "verification": verification}
        state, reasons = model.state, list(model.reasons or [])
        if state == "valid" and not verification["verified"]:
            unverified = verification["unverified_files"]
            state = "unverified"
            reasons = [
                f"{_files(len(unverified))} not checked by any hash, the hub gave none (a flipped byte "
                f"would not be seen): {_shown(unverified)}"
            ]
        connection.execute(
            sa.update(model_files)
            .where(model_files.c.id == model.id)
            .values(details=details, state=state, reasons=reasons)
        )


def downgrade() -> None:
    # Older releases know no "unverified": such a model is "valid" there, as it was before.
    connection = op.get_bind()
    connection.execute(
        sa.update(model_files).where(model_files.c.state == "unverified").values(state="valid", reasons=[])
    )
