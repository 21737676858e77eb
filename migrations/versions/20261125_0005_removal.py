"""removal: message tombstones, orphaned tool-call halves, erased summaries, the session's
removed count

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("messages", sa.Column("orphaned_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "session_summaries", sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "sessions",
        sa.Column("removed_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("removed_count")
    with op.batch_alter_table("session_summaries") as batch:
        batch.drop_column("erased_at")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("orphaned_at")
        batch.drop_column("removed_at")
