"""worker_models (a model's files on each worker of a cluster) and model_files.on_server

``on_server`` is false for a model whose files are only on workers (``models add --worker``);
every model stored before this revision is on the server's host, as it had to be.

Revision ID: 0010_worker_models
Revises: 0008_verification
Create Date: 2026-12-06 22:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_worker_models"
down_revision = "0009_image_pulls"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_files") as batch:
        batch.add_column(sa.Column("on_server", sa.Boolean(), nullable=False, server_default=sa.true()))
    op.create_table(
        "worker_models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "model_file_id",
            sa.Integer(),
            sa.ForeignKey("model_files.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("worker", sa.String(128), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model_file_id", "worker", name="uq_worker_models_model_worker"),
    )
    op.create_index("ix_worker_models_model_file_id", "worker_models", ["model_file_id"])


def downgrade() -> None:
    op.drop_index("ix_worker_models_model_file_id", table_name="worker_models")
    op.drop_table("worker_models")
    with op.batch_alter_table("model_files") as batch:
        batch.drop_column("on_server")
