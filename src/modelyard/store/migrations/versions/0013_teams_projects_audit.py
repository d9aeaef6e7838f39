"""users.role and users.disabled, projects (owning deployments and keys), project members, the audit log

An API key reaches the deployments of its project (``api_keys.reach``: ``project``); the console's
own key every project's, a member's playground key those of the member's projects.

Every installation before this revision had one kind of user, an administrator: every existing
user becomes ``admin``. Every existing deployment and API key goes into the project ``default``,
so keys, deployments and usage rows are all kept and reachable as before.

Revision ID: 0013_teams_projects_audit
Revises: 0012_autoscale
Create Date: 2026-12-07 05:40:00
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0013_teams_projects_audit"
down_revision = "0012_autoscale"
branch_labels = None
depends_on = None

DEFAULT_PROJECT = "default"
OWNED_TABLES = ("deployments", "api_keys")


def upgrade() -> None:
    projects = op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("tokens_per_day", sa.BigInteger(), nullable=True),
        sa.Column("tokens_per_month", sa.BigInteger(), nullable=True),
        sa.Column("max_concurrent_requests", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.bulk_insert(
        projects,
        [
            {
                "name": DEFAULT_PROJECT,
                "description": "everything made before projects",
                "created_at": datetime.now(UTC),
            }
        ],
    )
    op.create_table(
        "project_members",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "project_id", sa.Integer(), sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.UniqueConstraint("project_id", "user_id", name="uq_project_members_project_user"),
    )
    op.create_index("ix_project_members_project_id", "project_members", ["project_id"])
    op.create_index("ix_project_members_user_id", "project_members", ["user_id"])
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("object_type", sa.String(32), nullable=False),
        sa.Column("object_name", sa.String(256), nullable=False),
        sa.Column("project", sa.String(64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
    )
    for column in ("at", "actor", "action", "object_type", "object_name"):
        op.create_index(f"ix_audit_events_{column}", "audit_events", [column])

    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="member"))
        batch.add_column(sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))
    users = sa.table("users", sa.column("role", sa.String()), sa.column("is_admin", sa.Boolean()))
    op.execute(users.update().values(role="admin", is_admin=True))

    connection = op.get_bind()
    default_id = connection.scalar(
        sa.select(sa.column("id"))
        .select_from(sa.table("projects"))
        .where(sa.column("name") == DEFAULT_PROJECT)
    )
    # SQLite adds a column that references another table only by copying the table, and the
    # copy's DROP TABLE of ``deployments`` deletes every instance row by ON DELETE CASCADE: they
    # are read first and put back (``_keeping_instances``).
    with _keeping_instances():
        for table_name in OWNED_TABLES:
            with op.batch_alter_table(table_name) as batch:
                batch.add_column(sa.Column("project_id", sa.Integer(), nullable=True))
                if table_name == "api_keys":
                    batch.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
                    batch.add_column(
                        sa.Column("reach", sa.String(16), nullable=False, server_default="project")
                    )
            table = sa.table(table_name, sa.column("project_id", sa.Integer()))
            op.execute(table.update().values(project_id=default_id))
            with op.batch_alter_table(table_name) as batch:
                batch.alter_column("project_id", existing_type=sa.Integer(), nullable=False)
                batch.create_foreign_key(f"fk_{table_name}_project_id", "projects", ["project_id"], ["id"])
                batch.create_index(f"ix_{table_name}_project_id", ["project_id"])
                if table_name == "api_keys":
                    batch.create_foreign_key(
                        "fk_api_keys_owner_id", "users", ["owner_id"], ["id"], ondelete="SET NULL"
                    )


@contextmanager
def _keeping_instances() -> Iterator[None]:
    """Put back the instance rows that copying ``deployments`` (SQLite's batch mode) deleted."""
    connection = op.get_bind()
    instances = sa.Table("instances", sa.MetaData(), autoload_with=connection)
    kept = [dict(row._mapping) for row in connection.execute(sa.select(instances))]
    yield
    if kept and connection.scalar(sa.select(sa.func.count()).select_from(instances)) == 0:
        connection.execute(instances.insert(), kept)


def downgrade() -> None:
    with _keeping_instances():
        for table_name in reversed(OWNED_TABLES):
            with op.batch_alter_table(table_name) as batch:
                if table_name == "api_keys":
                    batch.drop_constraint("fk_api_keys_owner_id", type_="foreignkey")
                    batch.drop_column("owner_id")
                    batch.drop_column("reach")
                batch.drop_index(f"ix_{table_name}_project_id")
                batch.drop_constraint(f"fk_{table_name}_project_id", type_="foreignkey")
                batch.drop_column("project_id")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled")
        batch.drop_column("role")
    for column in ("at", "actor", "action", "object_type", "object_name"):
        op.drop_index(f"ix_audit_events_{column}", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index("ix_project_members_user_id", table_name="project_members")
    op.drop_index("ix_project_members_project_id", table_name="project_members")
    op.drop_table("project_members")
    op.drop_table("projects")
