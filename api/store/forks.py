"""Forks: a new session holding copies of another's messages up to a seq, and of the summaries
ending at or below it (`carried_at`), with their links and roll-ups re-pointed to the copies.

Every copy is one set-based statement (`INSERT ... SELECT` by seq range; links and a
summary's end messages found by joining on seq), so a fork holds no row in memory whatever the
session's size. The caller runs them in one transaction, after `read_one_snapshot`: on
PostgreSQL the statements then read the parent as it was when the first of them ran, and a
removal, a summary or an append committing meanwhile shows in none of them (on SQLite the
process's writers take turns, `api.db.transactions.transaction`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    and_,
    bindparam,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlalchemy.sql.selectable import NamedFromClause

from api.db import driver
from api.db.models import (
    MESSAGES,
    SESSIONS,
    SUMMARIES,
    SUMMARY_LINKS,
    Message,
    utcnow,
)
from api.store.keys import new_id, session_key
from api.store.rows import MESSAGE_COLUMNS, SESSION_COLUMNS, MessageRow, SessionRow

_messages = MESSAGES.c

SERIALIZATION_FAILURE = "40001"
"""PostgreSQL's SQLSTATE when a snapshot's write meets a row committed after the snapshot."""

DEADLOCK_DETECTED = "40P01"
"""PostgreSQL's SQLSTATE for the transaction it rolled back to break a deadlock."""

RUN_AGAIN = frozenset({SERIALIZATION_FAILURE, DEADLOCK_DETECTED})
"""The refusals after which a branch runs again: nothing of it was stored."""

COPIED_MESSAGE_COLUMNS = tuple(
    column.name
    for column in MESSAGES.columns
    if column.name not in ("id", "session_id", "append_id")
)
"""What a message's copy keeps: everything but its id, its session and the append that stored
it (internal, and the copy's was not appended)."""

COPIED_SUMMARY_COLUMNS = tuple(
    column.name
    for column in SUMMARIES.columns
    if column.name
    not in ("id", "session_id", "first_message_id", "last_message_id", "superseded_by", "erased_at")
)
"""What a carried summary keeps as it is; its end messages are the copies at its end seqs, and
its roll-up the copy of its roll-up, if the fork carries that (`repoint_superseded`)."""


async def read_one_snapshot(db: AsyncSession) -> None:
    """Make the transaction of `db`, not begun yet, read one snapshot (PostgreSQL's REPEATABLE
    READ, set when it begins: behind a transaction pooler too, since nothing outlives it)."""
    if db.get_bind().dialect.name == "postgresql":
        await db.connection(execution_options={"isolation_level": "REPEATABLE READ"})


_MESSAGE_AT = select(*MESSAGE_COLUMNS).where(
    _messages.session_id == bindparam("session_id"), _messages.seq == bindparam("seq")
)


async def message_at(db: AsyncSession, session_key: int, seq: int) -> MessageRow | None:
    """The session's message at `seq`, whatever its state (a tombstone included); on the driver
    in a read session (a chat wire's turn reads the newest first)."""
    rows = await driver.read(db, _MESSAGE_AT, {"session_id": session_key, "seq": seq})
    return MessageRow._make(rows[0]) if rows else None


async def insert_fork(
    db: AsyncSession, parent: SessionRow, external_id: str, fork_seq: int
) -> SessionRow | None:
    """INSERT the fork's session row: the parent's metadata, settings and format, ending at
    `fork_seq` with the tombstones up to it; None if `external_id` is taken."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    tombstones = (
        select(func.count())
        .select_from(MESSAGES)
        .where(
            _messages.session_id == parent.id,
            _messages.seq <= fork_seq,
            _messages.removed_at.is_not(None),
        )
        .scalar_subquery()
    )
    now = utcnow()
    statement = (
        dialect.insert(SESSIONS)
        .values(
            id=session_key(parent.tenant, external_id),
            tenant=parent.tenant,
            external_id=external_id,
            metadata=parent.metadata,
            settings=parent.settings,
            last_seq=fork_seq,
            pinned_seq=min(parent.pinned_seq, fork_seq),
            removed_count=tombstones,
            format=parent.format,
            created_at=now,
            updated_at=now,
            forked_from=parent.external_id,
            fork_seq=fork_seq,
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(*SESSION_COLUMNS)
    )
    try:
        row = (await db.execute(statement)).first()
    except DBAPIError as exc:
        # In one snapshot, an id taken by a session committed after the snapshot began is
        # refused this way, not skipped by ON CONFLICT DO NOTHING.
        if getattr(exc.orig, "sqlstate", None) != SERIALIZATION_FAILURE:
            raise
        return None
    return None if row is None else SessionRow._make(row)


async def copy_messages(db: AsyncSession, parent_key: int, fork_key: int, fork_seq: int) -> None:
    """Copy the parent's messages with seq <= `fork_seq` into the fork, same seqs, tombstones
    and orphans as they are, in seq order (so the copies' ids grow with their seqs, as an
    append's do): one statement, an index range scan on `(session_id, seq)`."""
    ids = new_id(
        db.get_bind().dialect.name, MESSAGES, func.row_number().over(order_by=_messages.seq)
    )
    source = select(
        literal(fork_key, BigInteger),
        *ids.values(),
        *(_messages[name] for name in COPIED_MESSAGE_COLUMNS),
    ).where(_messages.session_id == parent_key, _messages.seq <= fork_seq)
    await db.execute(
        insert(MESSAGES).from_select(
            ["session_id", *ids, *COPIED_MESSAGE_COLUMNS], source.order_by(_messages.seq)
        )
    )


def carried_at(summaries: NamedFromClause, fork_seq: int) -> ColumnElement[bool]:
    """The parent's summaries a fork at `fork_seq` carries: every one not erased that ends at
    or below it. Those absorbed by a roll-up reaching past it were live when the parent ended
    there and are live in the fork; the others keep their roll-ups (`repoint_superseded`)."""
    return and_(summaries.c.erased_at.is_(None), summaries.c.last_seq <= fork_seq)


def _same_summary(one: NamedFromClause, other: NamedFromClause) -> ColumnElement[bool]:
    """A summary and its copy: the same range at the same level (among the summaries a fork
    carries, that names one)."""
    return and_(
        one.c.first_seq == other.c.first_seq,
        one.c.last_seq == other.c.last_seq,
        one.c.level == other.c.level,
    )


async def carry_summaries(db: AsyncSession, parent_key: int, fork_key: int, fork_seq: int) -> int:
    """Copy the parent's summaries a fork at `fork_seq` carries (`carried_at`) into the fork,
    live, each naming the fork's copies of its end messages; how many. Copies its messages
    first (`copy_messages`)."""
    parent = SUMMARIES.alias("parent")
    parent_first, fork_first = aliased(Message), aliased(Message)
    parent_last, fork_last = aliased(Message), aliased(Message)
    ids = new_id(
        db.get_bind().dialect.name, SUMMARIES, func.row_number().over(order_by=parent.c.last_seq)
    )
    source = (
        select(
            literal(fork_key, BigInteger),
            *ids.values(),
            fork_first.id,
            fork_last.id,
            *(parent.c[name] for name in COPIED_SUMMARY_COLUMNS),
        )
        .select_from(parent)
        .join(
            parent_first,
            and_(
                parent_first.session_id == parent_key,
                parent_first.id == parent.c.first_message_id,
            ),
        )
        .join(
            fork_first,
            and_(fork_first.session_id == fork_key, fork_first.seq == parent_first.seq),
        )
        .join(
            parent_last,
            and_(parent_last.session_id == parent_key, parent_last.id == parent.c.last_message_id),
        )
        .join(fork_last, and_(fork_last.session_id == fork_key, fork_last.seq == parent_last.seq))
        .where(parent.c.session_id == parent_key, carried_at(parent, fork_seq))
        .order_by(parent.c.last_seq)
    )
    result = await db.execute(
        insert(SUMMARIES).from_select(
            ["session_id", *ids, "first_message_id", "last_message_id", *COPIED_SUMMARY_COLUMNS],
            source,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def repoint_superseded(
    db: AsyncSession, parent_key: int, fork_key: int, fork_seq: int
) -> None:
    """Each carried summary a roll-up (or repair) absorbed that the fork carries too is
    superseded by that roll-up's copy; one absorbed by a roll-up reaching past `fork_seq`
    stays live. One statement."""
    carried, parent = SUMMARIES, SUMMARIES.alias("parent")
    absorbing, absorbing_copy = SUMMARIES.alias("absorbing"), SUMMARIES.alias("copy")
    copy_of_absorbing = (
        select(absorbing_copy.c.id)
        .select_from(parent)
        .join(
            absorbing,
            and_(absorbing.c.session_id == parent_key, absorbing.c.id == parent.c.superseded_by),
        )
        .join(
            absorbing_copy,
            and_(absorbing_copy.c.session_id == fork_key, _same_summary(absorbing_copy, absorbing)),
        )
        .where(
            parent.c.session_id == parent_key,
            _same_summary(parent, carried),
            carried_at(parent, fork_seq),
            carried_at(absorbing, fork_seq),
        )
        .scalar_subquery()
    )
    await db.execute(
        update(carried)
        .where(carried.c.session_id == fork_key)
        .values(superseded_by=copy_of_absorbing)
    )


async def live_count(db: AsyncSession, fork_key: int) -> int:
    """The fork's live summaries."""
    count = select(func.count()).where(
        SUMMARIES.c.session_id == fork_key, SUMMARIES.c.superseded_by.is_(None)
    )
    return int((await db.execute(count)).scalar_one())


async def link_carried(db: AsyncSession, parent_key: int, fork_key: int, fork_seq: int) -> None:
    """Link each carried summary to the fork's copies of the messages its parent summary
    links (a roll-up links every message of what it absorbed): the parent's carried summary of
    the same range and level, its links joined on seq to the copies. One statement."""
    carried, parent = SUMMARIES.alias("carried"), SUMMARIES.alias("parent")
    links = SUMMARY_LINKS.alias("links")
    linked, copy = aliased(Message), aliased(Message)
    source = (
        select(literal(fork_key, BigInteger), carried.c.id, copy.id)
        .select_from(carried)
        .join(
            parent,
            and_(
                parent.c.session_id == parent_key,
                _same_summary(parent, carried),
                carried_at(parent, fork_seq),
            ),
        )
        .join(links, and_(links.c.session_id == parent_key, links.c.summary_id == parent.c.id))
        .join(linked, and_(linked.session_id == parent_key, linked.id == links.c.message_id))
        .join(copy, and_(copy.session_id == fork_key, copy.seq == linked.seq))
        .where(carried.c.session_id == fork_key)
    )
    await db.execute(
        insert(SUMMARY_LINKS).from_select(["session_id", "summary_id", "message_id"], source)
    )
