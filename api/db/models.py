"""SQLAlchemy models: the one declarative base and the four tables of docs/design.md section 2."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SCHEMA_REVISION = "0014"
"""The Alembic revision these models match; `/readyz` is not ready on any other."""

JSONType = JSON().with_variant(JSONB(), "postgresql")
"""JSON everywhere, JSONB on PostgreSQL."""

OptionalJSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""JSON of a nullable column: None is stored as SQL NULL, so a load has nothing to decode."""

BigId = BigInteger().with_variant(Integer(), "sqlite")
"""64-bit ids; on SQLite an INTEGER (the rowid, where it is the whole primary key)."""

SessionKey = BigInteger().with_variant(Integer(), "sqlite")
"""The session key: `sessions.id`, and `session_id` in every table that holds a session's
data, each of whose primary, unique and foreign keys includes it, so that Citus can
distribute them all by it, co-located (docs/design.md section 6). Derived from the session's
name (`api.store.keys.session_key`)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp on every database; SQLite stores UTC and returns it as UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSONType,
    }


EXPIRING_SESSIONS = "expires_at IS NOT NULL"
"""The predicate of the partial index the retention sweep reads."""


class Session(Base):
    """One chat session of a tenant; `last_seq` is the seq of its newest message.

    Appends lock this row (PostgreSQL) or take the write lock (SQLite) to hand out seqs.
    """

    __tablename__ = "sessions"
    __table_args__ = (
        Index("ix_sessions_tenant_created_at", "tenant", "created_at", "id"),
        Index(
            "ix_sessions_expires_at",
            "expires_at",
            postgresql_where=text(EXPIRING_SESSIONS),
            sqlite_where=text(EXPIRING_SESSIONS),
        ),
    )

    id: Mapped[int] = mapped_column(SessionKey, primary_key=True, autoincrement=False)
    """The session key: a function of `(tenant, external_id)` (`api.store.keys`), so the
    primary key keeps a tenant's session ids unique."""
    tenant: Mapped[str] = mapped_column(String(128))
    external_id: Mapped[str] = mapped_column(String(128))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    pinned_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    """Seq of the last leading system/developer message (0: none): the pinned prefix."""
    removed_count: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    """Messages removed (tombstones): the session holds `last_seq - removed_count` messages."""
    format: Mapped[str | None] = mapped_column(String(16))
    """`openai` (chat messages) or `responses` (Responses API items); fixed by the session's
    creation or its first append (None until then)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    forked_from: Mapped[str | None] = mapped_column(String(128))
    """A fork's parent: the session id it was forked from (the parent may be gone since)."""
    fork_seq: Mapped[int | None] = mapped_column(BigInteger)
    """A fork's fork point: the parent's seq of the last message it copied."""
    expires_at: Mapped[datetime | None]
    """When the session expires (None: never, unless idle past SESSION_IDLE_TTL_DAYS): from
    then on it answers 404, and the retention sweep deletes it."""


HIDDEN_MESSAGES = "removed_at IS NOT NULL OR orphaned_at IS NOT NULL"
"""The predicate of the partial index of messages no view shows (`api.store.rows.hidden`)."""


class Message(Base):
    """One appended message, immutable after insert except for its removal.

    The hot path (history load) is an index range scan on the unique `(session_id, seq)`
    index; plain text content lives in the `content` text column, and only list-of-parts
    content goes to the `content_parts` JSON column, so loads avoid JSON decoding.
    """

    __tablename__ = "messages"
    __table_args__ = (
        PrimaryKeyConstraint("session_id", "id"),
        UniqueConstraint("session_id", "seq"),
        # SQLite hands out ids as max + 1 (`api.store.keys.new_id`); a trace finds a message
        # by id alone.
        Index("ix_messages_id", "id"),
        Index(
            "uq_messages_session_id_client_id",
            "session_id",
            "client_id",
            unique=True,
            postgresql_where=text("client_id IS NOT NULL"),
            sqlite_where=text("client_id IS NOT NULL"),
        ),
        # Counts of removed and orphaned messages in a seq range read only those (the loader's
        # `truncated_messages`), whatever the range's size.
        Index(
            "ix_messages_hidden",
            "session_id",
            "seq",
            postgresql_where=text(HIDDEN_MESSAGES),
            sqlite_where=text(HIDDEN_MESSAGES),
        ),
    )

    session_id: Mapped[int] = mapped_column(
        SessionKey, ForeignKey("sessions.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigId, Identity())
    """From a sequence on PostgreSQL; on SQLite the next after the largest
    (`api.store.keys.new_id`). Grows with every insert, so it orders messages as stored."""
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text)
    content_parts: Mapped[list[Any] | None] = mapped_column(OptionalJSON)
    name: Mapped[str | None] = mapped_column(String(256))
    tool_calls: Mapped[list[Any] | None] = mapped_column(OptionalJSON)
    tool_call_id: Mapped[str | None] = mapped_column(String(256))
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", OptionalJSON)
    client_id: Mapped[str | None] = mapped_column(String(256))
    token_count: Mapped[int] = mapped_column(Integer)
    item: Mapped[str | None] = mapped_column(Text)
    """A Responses API item as appended (its JSON text, every key in order): the message of a
    `responses` session; the columns above then hold how the summarizer reads it."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    append_id: Mapped[int | None] = mapped_column(BigInteger)
    """The random id of the request that stored the message, set by PostgreSQL's
    one-statement append (`api.append.postgresql`): an append that lost its connection before
    its answer arrived finds out by it whether it landed. Never shown to clients."""
    removed_at: Mapped[datetime | None]
    """Set when a client removed the message: the row stays as a tombstone keeping its seq,
    with no content left (`api.store.removal`)."""
    orphaned_at: Mapped[datetime | None]
    """Set when the other half of its tool-call exchange was removed: kept as appended, but
    shown nowhere (no view may hold a call without its result, or the reverse); a client may
    still remove or pop it."""


class Summary(Base):
    """A summary of a contiguous seq range; `superseded_by` is the roll-up that absorbed it.

    The loader reads live summaries through the `(session_id, last_seq)` index.
    """

    __tablename__ = "session_summaries"
    __table_args__ = (
        PrimaryKeyConstraint("session_id", "id"),
        ForeignKeyConstraint(
            ["session_id", "superseded_by"],
            ["session_summaries.session_id", "session_summaries.id"],
        ),
        Index("ix_session_summaries_session_id_last_seq", "session_id", "last_seq"),
        Index("ix_session_summaries_id", "id"),
    )

    session_id: Mapped[int] = mapped_column(
        SessionKey, ForeignKey("sessions.id", ondelete="CASCADE")
    )
    id: Mapped[int] = mapped_column(BigId, Identity())
    """Handed out as a message's id is (`api.store.keys.new_id`)."""
    summary_text: Mapped[str] = mapped_column(Text)
    summary_prompt: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    temperature: Mapped[float] = mapped_column(Float)
    target_summary_tokens: Mapped[int] = mapped_column(Integer)
    keep_last_n: Mapped[int] = mapped_column(Integer)
    message_count: Mapped[int] = mapped_column(Integer)
    approx_tokens: Mapped[int] = mapped_column(Integer)
    first_message_id: Mapped[int] = mapped_column(BigInteger)
    last_message_id: Mapped[int] = mapped_column(BigInteger)
    first_seq: Mapped[int] = mapped_column(BigInteger)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    first_message_at: Mapped[datetime]
    last_message_at: Mapped[datetime]
    level: Mapped[int] = mapped_column(Integer, default=0)
    superseded_by: Mapped[int | None] = mapped_column(BigInteger)
    """The id of the roll-up that absorbed it, in the same session (deleting a cover sets it
    null first: `api.store.summaries.delete_covers`)."""
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    erased_at: Mapped[datetime | None]
    """Set when a removed message had reached this summary (it covered the message, or was
    made after one that did): its text is erased and it is no longer live."""


class SummaryMessage(Base):
    """Link from a summary to one message it covers; indexed by message for reverse tracing."""

    __tablename__ = "session_summary_messages"
    __table_args__ = (
        ForeignKeyConstraint(
            ["session_id", "summary_id"],
            ["session_summaries.session_id", "session_summaries.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["session_id", "message_id"], ["messages.session_id", "messages.id"], ondelete="CASCADE"
        ),
        Index("ix_session_summary_messages_message_id", "session_id", "message_id"),
    )

    session_id: Mapped[int] = mapped_column(SessionKey, primary_key=True)
    summary_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)


class SummaryJob(Base):
    """Pending background summarization of one session (at most one job per session).

    Workers claim a job by setting `status` to running with a lease (`locked_until`); a
    job whose lease ran out (its worker died) is claimed again, so a restart resumes it.
    """

    __tablename__ = "summary_jobs"
    __table_args__ = (Index("ix_summary_jobs_status_run_after", "status", "run_after"),)

    session_id: Mapped[int] = mapped_column(
        SessionKey,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    )
    trigger: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    run_after: Mapped[datetime] = mapped_column(default=utcnow)
    locked_until: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SummarizationLease(Base):
    """Who summarizes a session now: a lease that its holder renews while it works, so a
    holder that died loses it when `expires_at` passes (`api.locks`).

    A row, not a lock held by a connection, so it holds across replicas and behind a
    transaction pooler (which lends a server connection per transaction). `token` fences: a
    summary is saved only while its maker's token still holds the lease.
    """

    __tablename__ = "summarization_leases"

    session_id: Mapped[int] = mapped_column(
        SessionKey,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    )
    token: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[datetime]


class ConsoleLogin(Base):
    """A login to the operator console: the sha256 digest of the random token its browser's
    cookie holds (never the token itself), the tenant it shows, and when it ends
    (CONSOLE_LOGIN_TTL_SECONDS after it began). A row, so a login holds on every replica;
    logging out deletes it, and the next login deletes the expired ones (`expires_at`'s index).
    """

    __tablename__ = "console_logins"
    __table_args__ = (Index("ix_console_logins_expires_at", "expires_at"),)

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]


class StoredResponse(Base):
    """A response `POST /v1/responses` answered and stored (`store` not false): its body as
    answered, and the seqs its input and output items hold in its session (the conversation,
    or the session its `previous_response_id` chain lives in), so a later turn continues or
    branches that session from it (`api.compat.stored_responses`)."""

    __tablename__ = "responses"
    __table_args__ = (
        PrimaryKeyConstraint("session_id", "id"),
        Index("ix_responses_id", "id"),
    )

    session_id: Mapped[int] = mapped_column(
        SessionKey, ForeignKey("sessions.id", ondelete="CASCADE")
    )
    id: Mapped[str] = mapped_column(String(64))
    """Random (`resp_` and 48 hex digits), so unique without a constraint; a lookup by it
    alone reads `ix_responses_id`."""
    tenant: Mapped[str] = mapped_column(String(128))
    first_seq: Mapped[int] = mapped_column(BigInteger)
    """The seq of its first input item (its first output item when its input is empty)."""
    last_seq: Mapped[int] = mapped_column(BigInteger)
    """The seq of its last output item."""
    input_count: Mapped[int] = mapped_column(Integer)
    """How many of its items are input (the rest, up to `last_seq`, are its output)."""
    previous_response_id: Mapped[str | None] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    """The response object as answered (JSON text)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class BackgroundResponse(Base):
    """A response asked for with `background: true`, from its answer until its turn is stored
    (then it is a `StoredResponse` and this row is deleted), or for good once it failed or was
    cancelled (`api.store.background`)."""

    __tablename__ = "background_responses"
    __table_args__ = (
        PrimaryKeyConstraint("key", "id"),
        Index("ix_background_responses_status_updated_at", "status", "updated_at"),
    )

    key: Mapped[int] = mapped_column(SessionKey)
    """`session_key(tenant, id)`: what Citus distributes it by (no session row is named so)."""
    id: Mapped[str] = mapped_column(String(64))
    tenant: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    """`queued`, `in_progress`, `storing`, `failed` or `cancelled`."""
    request: Mapped[str | None] = mapped_column(Text)
    """The request as sent (JSON), until the response has ended."""
    body: Mapped[str] = mapped_column(Text)
    """The response object as answered so far (JSON)."""
    attempts: Mapped[int] = mapped_column(Integer)
    claimed_until: Mapped[datetime | None]
    """The lease of the worker running it."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelTokenRatio(Base):
    """How many tokens a model counts per token Precis counts (cl100k), learned from the usage
    its answers report (`api.model_tokens`): a row, so every replica and restart shares it."""

    __tablename__ = "model_token_ratios"

    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    ratio: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    """Answers the ratio was learned from (counted up to a bound)."""
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


SESSION_KEYS = {
    "sessions": "id",
    "messages": "session_id",
    "session_summaries": "session_id",
    "session_summary_messages": "session_id",
    "summary_jobs": "session_id",
    "summarization_leases": "session_id",
    "responses": "session_id",
    "background_responses": "key",
}
"""Each table holding a session's data (and background responses, keyed as their id would
key a session), and its session-key column: what Citus distributes them by (docs/design.md
section 6)."""

# The tables as SQLAlchemy Core sees them, for the statements built on columns (`.c`).
SESSIONS = cast(Table, Session.__table__)
MESSAGES = cast(Table, Message.__table__)
SUMMARIES = cast(Table, Summary.__table__)
SUMMARY_LINKS = cast(Table, SummaryMessage.__table__)
SUMMARY_JOBS = cast(Table, SummaryJob.__table__)
CONSOLE_LOGINS = cast(Table, ConsoleLogin.__table__)
MODEL_TOKEN_RATIOS = cast(Table, ModelTokenRatio.__table__)
RESPONSES = cast(Table, StoredResponse.__table__)
BACKGROUND_RESPONSES = cast(Table, BackgroundResponse.__table__)
