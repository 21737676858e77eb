"""pinned prefix: sessions.pinned_seq

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 16:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("pinned_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    # The leading system/developer messages of every stored session.
    op.execute(
        "UPDATE sessions SET pinned_seq = COALESCE("
        "(SELECT MIN(m.seq) - 1 FROM messages m WHERE m.session_id = sessions.id "
        "AND m.role NOT IN ('system', 'developer')), last_seq)"
    )


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("pinned_seq")
