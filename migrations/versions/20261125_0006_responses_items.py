"""responses items: the session's message format, a message's verbatim item

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("format", sa.String(16), nullable=True))
    op.add_column("messages", sa.Column("item", sa.Text(), nullable=True))
    # every session that holds messages so far holds chat messages
    op.execute("UPDATE sessions SET format = 'openai' WHERE last_seq > 0")


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("item")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("format")
