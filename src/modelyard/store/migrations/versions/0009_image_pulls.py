"""image pulls: registry credentials (sealed passwords) and the pull of an instance's current start

Revision ID: 0009_image_pulls
Revises: 0008_verification
Create Date: 2026-12-06 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_image_pulls"
down_revision = "0008_verification"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_credentials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("registry_host", sa.String(256), nullable=False),
        sa.Column("username", sa.String(256), nullable=False),
        sa.Column("password", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("image_pull", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("image_pull")
    op.drop_table("registry_credentials")
