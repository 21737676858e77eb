"""session lifecycle: a fork's parent and fork point, and a session's expiry

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXPIRING = sa.text("expires_at IS NOT NULL")


def upgrade() -> None:
    op.add_column("sessions", sa.Column("forked_from", sa.String(length=128), nullable=True))
    op.add_column("sessions", sa.Column("fork_seq", sa.BigInteger(), nullable=True))
    op.add_column("sessions", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_sessions_expires_at",
        "sessions",
        ["expires_at"],
        postgresql_where=EXPIRING,
        sqlite_where=EXPIRING,
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_expires_at", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("fork_seq")
        batch.drop_column("forked_from")
