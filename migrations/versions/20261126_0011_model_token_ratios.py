"""model token ratios: the tokens each model counts per token Precis counts, learned

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_token_ratios",
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_model_token_ratios")),
    )


def downgrade() -> None:
    op.drop_table("model_token_ratios")
