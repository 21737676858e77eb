"""hidden messages: a partial index of removed and orphaned messages by (session, seq)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HIDDEN = "removed_at IS NOT NULL OR orphaned_at IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_messages_hidden",
        "messages",
        ["session_id", "seq"],
        postgresql_where=sa.text(HIDDEN),
        sqlite_where=sa.text(HIDDEN),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_hidden", table_name="messages")
