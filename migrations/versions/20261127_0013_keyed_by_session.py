"""keyed by session: every key of a session's table includes the session key (Citus-ready)

The session key (`sessions.id`) becomes a function of the session's name (tenant and session
id: `api.store.keys.session_key`), and every table holding a session's data is rewritten so
that each primary, unique and foreign key between them includes it: messages, summaries and
responses are keyed by `(session_id, id)`, a link carries its session, a job and a
summarization lease are keyed by their session alone; `(tenant, external_id)` is unique through
the key. Each table is copied aside (every session's rows under its new key), dropped,
created in its new shape and filled again, row ids kept; on PostgreSQL message and summary ids
come from identity columns from then on. When the `citus` extension is installed, the session
tables are then distributed by the session key, co-located (docs/operating.md). Run it with
the service stopped: it rewrites every table a session's data is in.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 02:00:00
"""

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

from api.store.keys import session_key

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
OPTIONAL_JSON = sa.JSON(none_as_null=True).with_variant(
    sa.dialects.postgresql.JSONB(none_as_null=True), "postgresql"
)
TIMESTAMP = sa.DateTime(timezone=True)
HIDDEN = sa.text("removed_at IS NOT NULL OR orphaned_at IS NOT NULL")
WITH_CLIENT_ID = sa.text("client_id IS NOT NULL")
EXPIRING = sa.text("expires_at IS NOT NULL")

TABLES = (
    "session_summary_messages",
    "summary_jobs",
    "summarization_leases",
    "responses",
    "session_summaries",
    "messages",
    "sessions",
)
"""The tables rewritten, each before the tables it refers to."""

KEYS = "session_keys_0013"
"""The old session key and the new of every session, while the upgrade runs."""

DISTRIBUTED = (
    "sessions",
    "messages",
    "session_summaries",
    "session_summary_messages",
    "summary_jobs",
    "summarization_leases",
    "responses",
)
"""The tables Citus distributes by the session key (`sessions.id`, else `session_id`)."""

REFERENCE = ("console_logins", "model_token_ratios")
"""Small tables every node reads whole: Citus's reference tables."""


def _session_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("external_id", sa.String(128), nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("settings", JSON, nullable=False),
        sa.Column("last_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("pinned_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("removed_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("format", sa.String(16), nullable=True),
        sa.Column("forked_from", sa.String(128), nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=True),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
    ]


def _create_sessions(*, keyed: bool) -> None:
    """`sessions` keyed by the name's key, or as revision 0012 left it."""
    if keyed:
        op.create_table(
            "sessions",
            sa.Column("id", BIG_ID, autoincrement=False, nullable=False),
            *_session_columns(),
            sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        )
        op.create_index("ix_sessions_tenant_created_at", "sessions", ["tenant", "created_at", "id"])
    else:
        op.create_table(
            "sessions",
            sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
            *_session_columns(),
            sa.PrimaryKeyConstraint("id", name="pk_sessions"),
            sa.UniqueConstraint("tenant", "external_id", name="uq_sessions_tenant_external_id"),
        )
        op.create_index("ix_sessions_tenant_id", "sessions", ["tenant", "id"])
    op.create_index(
        "ix_sessions_expires_at",
        "sessions",
        ["expires_at"],
        postgresql_where=EXPIRING,
        sqlite_where=EXPIRING,
    )
    op.create_table(
        "summarization_leases",
        sa.Column("session_id", BIG_ID, autoincrement=False, nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        _session_fk("summarization_leases"),
        sa.PrimaryKeyConstraint("session_id", name="pk_summarization_leases"),
    )


def _message_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_parts", OPTIONAL_JSON, nullable=True),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("tool_calls", OPTIONAL_JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(256), nullable=True),
        sa.Column("metadata", OPTIONAL_JSON, nullable=True),
        sa.Column("client_id", sa.String(256), nullable=True),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("item", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("append_id", sa.BigInteger(), nullable=True),
        sa.Column("removed_at", TIMESTAMP, nullable=True),
        sa.Column("orphaned_at", TIMESTAMP, nullable=True),
    ]


def _summary_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("summary_text", sa.Text(), nullable=False),
        sa.Column("summary_prompt", sa.Text(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("target_summary_tokens", sa.Integer(), nullable=False),
        sa.Column("keep_last_n", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("approx_tokens", sa.Integer(), nullable=False),
        sa.Column("first_message_id", sa.BigInteger(), nullable=False),
        sa.Column("last_message_id", sa.BigInteger(), nullable=False),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("first_message_at", TIMESTAMP, nullable=False),
        sa.Column("last_message_at", TIMESTAMP, nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("superseded_by", sa.BigInteger(), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("erased_at", TIMESTAMP, nullable=True),
    ]


def _job_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("run_after", TIMESTAMP, nullable=False),
        sa.Column("locked_until", TIMESTAMP, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    ]


def _response_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("input_count", sa.Integer(), nullable=False),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    ]


def _session_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["session_id"], ["sessions.id"], name=f"fk_{table}_session_id_sessions", ondelete="CASCADE"
    )


def _message_indexes() -> None:
    op.create_index(
        "uq_messages_session_id_client_id",
        "messages",
        ["session_id", "client_id"],
        unique=True,
        postgresql_where=WITH_CLIENT_ID,
        sqlite_where=WITH_CLIENT_ID,
    )
    op.create_index(
        "ix_messages_hidden",
        "messages",
        ["session_id", "seq"],
        postgresql_where=HIDDEN,
        sqlite_where=HIDDEN,
    )


def _create_keyed() -> None:
    """The tables in their new shape: every key includes the session key."""
    _create_sessions(keyed=True)
    op.create_table(
        "messages",
        sa.Column("session_id", BIG_ID, nullable=False),
        sa.Column("id", BIG_ID, sa.Identity(), nullable=False),
        *_message_columns(),
        _session_fk("messages"),
        sa.PrimaryKeyConstraint("session_id", "id", name="pk_messages"),
        sa.UniqueConstraint("session_id", "seq", name="uq_messages_session_id_seq"),
    )
    _message_indexes()
    op.create_index("ix_messages_id", "messages", ["id"])
    op.create_table(
        "session_summaries",
        sa.Column("session_id", BIG_ID, nullable=False),
        sa.Column("id", BIG_ID, sa.Identity(), nullable=False),
        *_summary_columns(),
        _session_fk("session_summaries"),
        sa.ForeignKeyConstraint(
            ["session_id", "superseded_by"],
            ["session_summaries.session_id", "session_summaries.id"],
            name="fk_session_summaries_session_id_session_summaries",
        ),
        sa.PrimaryKeyConstraint("session_id", "id", name="pk_session_summaries"),
    )
    op.create_index(
        "ix_session_summaries_session_id_last_seq",
        "session_summaries",
        ["session_id", "last_seq"],
    )
    op.create_index("ix_session_summaries_id", "session_summaries", ["id"])
    op.create_table(
        "session_summary_messages",
        sa.Column("session_id", BIG_ID, nullable=False),
        sa.Column("summary_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id", "summary_id"],
            ["session_summaries.session_id", "session_summaries.id"],
            name="fk_session_summary_messages_session_id_session_summaries",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id", "message_id"],
            ["messages.session_id", "messages.id"],
            name="fk_session_summary_messages_session_id_messages",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "session_id", "summary_id", "message_id", name="pk_session_summary_messages"
        ),
    )
    op.create_index(
        "ix_session_summary_messages_message_id",
        "session_summary_messages",
        ["session_id", "message_id"],
    )
    op.create_table(
        "summary_jobs",
        sa.Column("session_id", BIG_ID, autoincrement=False, nullable=False),
        *_job_columns(),
        _session_fk("summary_jobs"),
        sa.PrimaryKeyConstraint("session_id", name="pk_summary_jobs"),
    )
    op.create_index("ix_summary_jobs_status_run_after", "summary_jobs", ["status", "run_after"])
    op.create_table(
        "responses",
        sa.Column("session_id", BIG_ID, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        *_response_columns(),
        _session_fk("responses"),
        sa.PrimaryKeyConstraint("session_id", "id", name="pk_responses"),
    )
    op.create_index("ix_responses_id", "responses", ["id"])


def _create_unkeyed() -> None:
    """The tables as revision 0012 left them."""
    _create_sessions(keyed=False)
    op.create_table(
        "messages",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", BIG_ID, nullable=False),
        *_message_columns(),
        _session_fk("messages"),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.UniqueConstraint("session_id", "seq", name="uq_messages_session_id_seq"),
    )
    _message_indexes()
    op.create_table(
        "session_summaries",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", BIG_ID, nullable=False),
        *_summary_columns(),
        _session_fk("session_summaries"),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["session_summaries.id"],
            name="fk_session_summaries_superseded_by_session_summaries",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_session_summaries"),
    )
    op.create_index(
        "ix_session_summaries_session_id_last_seq",
        "session_summaries",
        ["session_id", "last_seq"],
    )
    op.create_table(
        "session_summary_messages",
        sa.Column("summary_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["summary_id"],
            ["session_summaries.id"],
            name="fk_session_summary_messages_summary_id_session_summaries",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name="fk_session_summary_messages_message_id_messages",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("summary_id", "message_id", name="pk_session_summary_messages"),
    )
    op.create_index(
        "ix_session_summary_messages_message_id", "session_summary_messages", ["message_id"]
    )
    op.create_table(
        "summary_jobs",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", BIG_ID, nullable=False),
        *_job_columns(),
        _session_fk("summary_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_summary_jobs"),
        sa.UniqueConstraint("session_id", name="uq_summary_jobs_session_id"),
    )
    op.create_index("ix_summary_jobs_status_run_after", "summary_jobs", ["status", "run_after"])
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("session_id", BIG_ID, nullable=False),
        *_response_columns()[1:],
        _session_fk("responses"),
        sa.PrimaryKeyConstraint("id", name="pk_responses"),
    )
    op.create_index("ix_responses_session_id", "responses", ["session_id"])


def _column_names(table: str) -> list[str]:
    return [column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)]


def _rewrite(create: Callable[[], None], copied: dict[str, str]) -> None:
    """Copy each table aside (`copied`: the SELECT that reads a table's rows in its new
    shape), drop them all, create them anew (`create`) and fill them from the copies, ids kept."""
    for table in TABLES:
        op.execute(f"CREATE TABLE {table}_0013 AS {copied[table]}")
    for table in TABLES:
        op.drop_table(table)
    create()
    for table in reversed(TABLES):
        columns = ", ".join(_column_names(f"{table}_0013"))
        op.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}_0013")
        op.drop_table(f"{table}_0013")
    if op.get_bind().dialect.name == "postgresql":
        for table in ("sessions", "messages", "session_summaries", "summary_jobs"):
            if "id" in _column_names(table):
                _continue_ids(table)


def _continue_ids(table: str) -> None:
    """Start the table's id sequence after the ids copied into it."""
    op.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
        f"coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
    )


def _citus_installed() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    found = bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def _distribute() -> None:
    """Distribute the session tables by the session key, co-located with `sessions`, and make
    the small shared tables reference tables (Citus's `create_distributed_table`)."""
    op.execute("SELECT create_distributed_table('sessions', 'id')")
    for table in DISTRIBUTED[1:]:
        op.execute(
            f"SELECT create_distributed_table('{table}', 'session_id', colocate_with => 'sessions')"
        )
    for table in REFERENCE:
        op.execute(f"SELECT create_reference_table('{table}')")


def _key_sessions() -> None:
    """Fill `KEYS` with every session's new key, derived from its name; stop if two names
    share one (the upgrade cannot key them both: rename one first)."""
    bind = op.get_bind()
    sessions = bind.execute(sa.text("SELECT id, tenant, external_id FROM sessions")).all()
    keyed = [
        {"old_id": old_id, "new_id": session_key(tenant, external_id)}
        for old_id, tenant, external_id in sessions
    ]
    names: dict[int, tuple[str, str]] = {}
    for (_, tenant, external_id), row in zip(sessions, keyed, strict=True):
        other = names.setdefault(row["new_id"], (tenant, external_id))
        if other != (tenant, external_id):
            raise RuntimeError(f"sessions {other} and {(tenant, external_id)} share a session key")
    op.create_table(
        KEYS,
        sa.Column("old_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("new_id", sa.BigInteger(), nullable=False),
    )
    keys = sa.table(KEYS, sa.column("old_id"), sa.column("new_id"))
    for start in range(0, len(keyed), 1000):
        bind.execute(keys.insert(), keyed[start : start + 1000])


def _rekeyed(table: str, *, leaving_out: tuple[str, ...] = ()) -> str:
    """The SELECT of a table's rows with each session's new key in its key column."""
    column = "id" if table == "sessions" else "session_id"
    others = [name for name in _column_names(table) if name != column and name not in leaving_out]
    return (
        f"SELECT k.new_id AS {column}, {', '.join(f't.{name}' for name in others)} "
        f"FROM {table} AS t JOIN {KEYS} AS k ON k.old_id = t.{column}"
    )


def upgrade() -> None:
    _key_sessions()
    _rewrite(
        _create_keyed,
        {
            "sessions": _rekeyed("sessions"),
            "messages": _rekeyed("messages"),
            "session_summaries": _rekeyed("session_summaries"),
            "session_summary_messages": (
                "SELECT k.new_id AS session_id, l.summary_id, l.message_id "
                "FROM session_summary_messages AS l "
                "JOIN session_summaries AS s ON s.id = l.summary_id "
                f"JOIN {KEYS} AS k ON k.old_id = s.session_id"
            ),
            "summary_jobs": _rekeyed("summary_jobs", leaving_out=("id",)),
            "summarization_leases": _rekeyed("summarization_leases"),
            "responses": _rekeyed("responses"),
        },
    )
    op.drop_table(KEYS)
    if _citus_installed():
        _distribute()


def downgrade() -> None:
    if _citus_installed():
        # the session tables are copied aside and dropped below, distributed or not
        for table in REFERENCE:
            op.execute(f"SELECT undistribute_table('{table}')")
    _rewrite(
        _create_unkeyed,
        {
            "sessions": "SELECT * FROM sessions",
            "messages": "SELECT * FROM messages",
            "session_summaries": "SELECT * FROM session_summaries",
            "session_summary_messages": (
                "SELECT summary_id, message_id FROM session_summary_messages"
            ),
            "summary_jobs": "SELECT * FROM summary_jobs",
            "summarization_leases": "SELECT * FROM summarization_leases",
            "responses": "SELECT * FROM responses",
        },
    )
