"""deployments.routing: how the gateway picks a replica (least-outstanding or prefix)

<<<<<<<< HEAD:src/modelyard/store/migrations/versions/0005_deployment_routing.py
Revision ID: 0005
Revises: 0004
========
Revision ID: 0004
Revises: 0003
>>>>>>>> 7960d00 (gateway workers journal their own usage rows; the main process writes them once and answers UsageCommitted, replays a dead worker's segments before restarting it and every earlier run's at start; key limits and the usage journal on the fast path; migration 0004 after main's 0003):src/modelyard/store/migrations/versions/0004_deployment_routing.py
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

<<<<<<<< HEAD:src/modelyard/store/migrations/versions/0005_deployment_routing.py
revision = "0005"
down_revision = "0004"
========
revision = "0004"
down_revision = "0003"
>>>>>>>> 7960d00 (gateway workers journal their own usage rows; the main process writes them once and answers UsageCommitted, replays a dead worker's segments before restarting it and every earlier run's at start; key limits and the usage journal on the fast path; migration 0004 after main's 0003):src/modelyard/store/migrations/versions/0004_deployment_routing.py
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(
            sa.Column("routing", sa.String(length=32), nullable=False, server_default="least-outstanding")
        )


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("routing")
