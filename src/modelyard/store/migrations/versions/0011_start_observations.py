"""start_observations: each engine start's KV cache, predicted against logged (the fleet's correction)

Revision ID: 0011_start_observations
Revises: 0008_verification
Create Date: 2026-12-06 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_start_observations"
down_revision = "0010_worker_models"
branch_labels = None
depends_on = None

BYTES_COLUMNS = (
    "predicted_kv_bytes",
    "predicted_kv_tokens",
    "shown_kv_tokens",
    "logged_kv_bytes",
    "logged_kv_tokens",
)
OPTIONAL_PAIRS = ("weights", "activation", "non_torch")


def upgrade() -> None:
    op.create_table(
        "start_observations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deployment_name", sa.String(128), nullable=False),
        sa.Column("deployment_uid", sa.String(32), nullable=True),
        sa.Column("instance_uid", sa.String(32), nullable=False),
        sa.Column("replica_index", sa.Integer(), nullable=False),
        sa.Column("start_number", sa.Integer(), nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("engine_version", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(128), nullable=False),
        sa.Column("architecture", sa.String(128), nullable=False),
        sa.Column("memory_fraction", sa.Float(), nullable=False),
        sa.Column("context_tokens", sa.Integer(), nullable=False),
        sa.Column("enforce_eager", sa.Boolean(), nullable=False),
        sa.Column("kv_dtype", sa.String(32), nullable=False),
        sa.Column("tensor_parallel", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in BYTES_COLUMNS),
        sa.Column("booked_kv_tokens", sa.BigInteger(), nullable=True),
        *(
            column
            for part in OPTIONAL_PAIRS
            for column in (
                sa.Column(f"predicted_{part}_bytes", sa.BigInteger(), nullable=False),
                sa.Column(f"logged_{part}_bytes", sa.BigInteger(), nullable=True),
            )
        ),
    )
    op.create_index("ix_start_observations_observed_at", "start_observations", ["observed_at"])
    op.create_index("ix_start_observations_deployment_name", "start_observations", ["deployment_name"])
    op.create_index("ix_start_observations_instance_uid", "start_observations", ["instance_uid"])


def downgrade() -> None:
    op.drop_table("start_observations")
