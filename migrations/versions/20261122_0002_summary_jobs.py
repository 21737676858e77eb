"""summary jobs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 10:27:06.569442
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "summary_jobs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "session_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_summary_jobs_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_summary_jobs")),
        sa.UniqueConstraint("session_id", name=op.f("uq_summary_jobs_session_id")),
    )
    with op.batch_alter_table("summary_jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_summary_jobs_status_run_after", ["status", "run_after"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("summary_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_summary_jobs_status_run_after")

    op.drop_table("summary_jobs")
