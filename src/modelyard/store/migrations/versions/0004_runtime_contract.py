"""the runtime contract: engine handles, launch tokens, unique ids that are never reused

Instances get a uid (their log folder's name), the runtime that runs them, the engine's opaque
handle, the launch token recorded before each start, the mounts the engine sees, and when
verification last passed or was asked for. Deployments and events get uids, so that a name
deployed again after ``rm`` has its own events. On SQLite the instances table becomes
AUTOINCREMENT, so that an instance id is never handed out twice.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 22:30:00
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _fill_uids(table: str) -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text(f"SELECT id FROM {table} WHERE uid IS NULL")).all()
    for (row_id,) in rows:
        connection.execute(
            sa.text(f"UPDATE {table} SET uid = :uid WHERE id = :id"), {"uid": uuid.uuid4().hex, "id": row_id}
        )


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("deployments") as batch_op:
        batch_op.add_column(sa.Column("uid", sa.String(length=32), nullable=True))
    _fill_uids("deployments")
    with op.batch_alter_table("deployments") as batch_op:
        batch_op.create_index("ix_deployments_uid", ["uid"], unique=True)

    with op.batch_alter_table(
        "instances",
        recreate="always" if sqlite else "auto",
        table_kwargs={"sqlite_autoincrement": True} if sqlite else {},
    ) as batch_op:
        batch_op.add_column(sa.Column("uid", sa.String(length=32), nullable=True))
        batch_op.add_column(
            sa.Column("runtime", sa.String(length=16), nullable=False, server_default="process")
        )
        batch_op.add_column(sa.Column("handle", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("launch_token", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("engine_port", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mounts", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("verification_requested_at", sa.DateTime(timezone=True), nullable=True))
    _fill_uids("instances")
    with op.batch_alter_table("instances") as batch_op:
        batch_op.create_index("ix_instances_uid", ["uid"], unique=True)
        batch_op.create_index("ix_instances_launch_token", ["launch_token"], unique=False)

    with op.batch_alter_table("instance_events") as batch_op:
        batch_op.add_column(sa.Column("deployment_uid", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("instance_uid", sa.String(length=32), nullable=True))
        batch_op.create_index("ix_instance_events_deployment_uid", ["deployment_uid"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("instance_events") as batch_op:
        batch_op.drop_index("ix_instance_events_deployment_uid")
        batch_op.drop_column("instance_uid")
        batch_op.drop_column("deployment_uid")
    with op.batch_alter_table("instances") as batch_op:
        batch_op.drop_index("ix_instances_launch_token")
        batch_op.drop_index("ix_instances_uid")
        for column in (
            "verification_requested_at",
            "verified_at",
            "mounts",
            "engine_port",
            "launch_token",
            "handle",
            "runtime",
            "uid",
        ):
            batch_op.drop_column(column)
    with op.batch_alter_table("deployments") as batch_op:
        batch_op.drop_index("ix_deployments_uid")
        batch_op.drop_column("uid")
