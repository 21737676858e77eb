"""console logins: one row per login to the operator console, its token's digest the key

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_logins",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_console_logins")),
    )
    op.create_index("ix_console_logins_expires_at", "console_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_logins_expires_at", table_name="console_logins")
    op.drop_table("console_logins")
