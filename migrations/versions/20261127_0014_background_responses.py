"""background responses: POST /v1/responses with background: true, until its turn is stored

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _citus_installed() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    found = bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def upgrade() -> None:
    op.create_table(
        "background_responses",
        sa.Column("key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("request", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", "id", name=op.f("pk_background_responses")),
    )
    op.create_index(
        "ix_background_responses_status_updated_at",
        "background_responses",
        ["status", "updated_at"],
    )
    if _citus_installed():
        op.execute(
            "SELECT create_distributed_table('background_responses', 'key', "
            "colocate_with => 'sessions')"
        )


def downgrade() -> None:
    op.drop_index("ix_background_responses_status_updated_at", table_name="background_responses")
    op.drop_table("background_responses")
