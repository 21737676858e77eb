"""Read-only SQL of the operator tools (`scripts/trace_summary`, `scripts/verify`).

Nothing here writes. The request paths never call these functions; the tools never call
the HTTP routes. Every integrity query is scoped to one session and bounded by a `limit`
where it can return many rows, so a check's memory does not grow with the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, case, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from api.db.engine import create_engine
from api.db.models import Message, Session, Summary, SummaryMessage

DEFAULT_TENANT = "default"
"""The development-mode tenant (`api.auth.DEVELOPMENT_TENANT`); not imported from there so the
tools start without loading FastAPI."""

EXAMPLE_LIMIT = 5
"""Offending rows named per check and session: enough to act on, bounded for broken databases."""


def read_engine(database_url: str) -> AsyncEngine:
    """An engine whose transactions each read one consistent snapshot.

    The tools run against live servers: without a snapshot, a message appended between two
    queries of a check would look like a violation. PostgreSQL gets REPEATABLE READ and
    read-only transactions; SQLite's driver would not start a transaction before a SELECT,
    so an explicit BEGIN is emitted (the recipe of SQLAlchemy's aiosqlite documentation).
    Raises FileNotFoundError for an SQLite file that does not exist.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        return create_engine(
            database_url,
            isolation_level="REPEATABLE READ",
            execution_options={"postgresql_readonly": True},
        )
    if url.database and url.database != ":memory:" and not Path(url.database).is_file():
        # create_engine would create the file (and its folder): a read-only tool must not.
        raise FileNotFoundError(f"no SQLite database at {url.database}")
    engine = create_engine(database_url)

    @event.listens_for(engine.sync_engine, "connect")
    def _driver_autocommit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")

    return engine


# --- lookups --------------------------------------------------------------------------------


async def session_by_id(db: AsyncSession, session_id: int) -> Session | None:
    return await db.get(Session, session_id)


async def session_by_external_id(db: AsyncSession, tenant: str, external_id: str) -> Session | None:
    return await db.scalar(
        select(Session).where(Session.tenant == tenant, Session.external_id == external_id)
    )


async def summary_by_id(db: AsyncSession, summary_id: int) -> Summary | None:
    return await db.get(Summary, summary_id)


async def message_by_id(db: AsyncSession, message_id: int) -> Message | None:
    return await db.get(Message, message_id)


async def linked_messages(db: AsyncSession, summary_id: int) -> list[Message]:
    """The messages a summary links, in seq order."""
    return list(
        await db.scalars(
            select(Message)
            .join(SummaryMessage, SummaryMessage.message_id == Message.id)
            .where(SummaryMessage.summary_id == summary_id)
            .order_by(Message.seq)
        )
    )


async def absorbed_summaries(db: AsyncSession, summary_id: int) -> list[Summary]:
    """The summaries a roll-up absorbed (`superseded_by` = its id), oldest range first."""
    return list(
        await db.scalars(
            select(Summary).where(Summary.superseded_by == summary_id).order_by(Summary.first_seq)
        )
    )


async def session_summaries(db: AsyncSession, session_id: int) -> list[Summary]:
    """Every summary of a session, live and superseded, by range then highest level first."""
    return list(
        await db.scalars(
            select(Summary)
            .where(Summary.session_id == session_id)
            .order_by(Summary.first_seq, Summary.level.desc(), Summary.id)
        )
    )


async def summaries_covering(db: AsyncSession, message_id: int) -> list[Summary]:
    """The summaries linking a message: the live one first, then down the superseded chain."""
    return list(
        await db.scalars(
            select(Summary)
            .join(SummaryMessage, SummaryMessage.summary_id == Summary.id)
            .where(SummaryMessage.message_id == message_id)
            .order_by(Summary.superseded_by.is_not(None), Summary.level.desc(), Summary.id)
        )
    )


# --- streaming sessions ---------------------------------------------------------------------


async def count_sessions(db: AsyncSession) -> int:
    return int(await db.scalar(select(func.count()).select_from(Session)) or 0)


async def session_ids_after(db: AsyncSession, after_id: int, limit: int) -> list[int]:
    """One keyset page of session ids in order: callers stream all sessions page by page."""
    return list(
        await db.scalars(
            select(Session.id).where(Session.id > after_id).order_by(Session.id).limit(limit)
        )
    )


# --- integrity ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageStats:
    """Count and seq bounds of a session's messages."""

    count: int
    min_seq: int | None
    max_seq: int | None


@dataclass(frozen=True)
class SeqGap:
    """Seqs `first..last` are missing from a session."""

    first: int
    last: int


@dataclass(frozen=True)
class MessageRef:
    """A message named in a report."""

    id: int
    seq: int


@dataclass(frozen=True)
class Sample:
    """How many rows break a rule, and the first few of them (at most EXAMPLE_LIMIT)."""

    total: int
    examples: list[MessageRef]


@dataclass(frozen=True)
class LinkStats:
    """Links of one summary against the messages of its seq range.

    `linked`: links it has; `in_range`: links to messages of its session inside its range;
    `range_messages`: messages of its session inside its range.
    """

    summary_id: int
    linked: int
    in_range: int
    range_messages: int


@dataclass(frozen=True)
class CoverageProblem:
    """A message at or before the newest live summary's end, linked to `live_links` live ones."""

    message: MessageRef
    live_links: int


async def message_stats(db: AsyncSession, session_id: int) -> MessageStats:
    count, min_seq, max_seq = (
        await db.execute(
            select(func.count(), func.min(Message.seq), func.max(Message.seq)).where(
                Message.session_id == session_id
            )
        )
    ).one()
    return MessageStats(count=int(count), min_seq=min_seq, max_seq=max_seq)


async def seq_gaps(db: AsyncSession, session_id: int, limit: int = EXAMPLE_LIMIT) -> list[SeqGap]:
    """Missing seq ranges of a session (seqs start at 1), oldest first."""
    previous = func.lag(Message.seq, 1, 0).over(order_by=Message.seq)
    ordered = (
        select(Message.seq.label("seq"), previous.label("previous"))
        .where(Message.session_id == session_id)
        .subquery()
    )
    rows = await db.execute(
        select(ordered.c.previous + 1, ordered.c.seq - 1)
        .where(ordered.c.seq - ordered.c.previous > 1)
        .order_by(ordered.c.seq)
        .limit(limit)
    )
    return [SeqGap(first=int(first), last=int(last)) for first, last in rows.tuples()]


async def bad_token_counts(db: AsyncSession, session_id: int) -> Sample:
    """Messages whose stored token count is missing or negative."""
    condition = and_(
        Message.session_id == session_id,
        (Message.token_count.is_(None)) | (Message.token_count < 0),
    )
    return await _sample(db, condition)


async def link_stats(db: AsyncSession, session_id: int) -> list[LinkStats]:
    """Per summary of the session: its links against the messages of its range."""
    in_range = and_(
        Message.session_id == Summary.session_id,
        Message.seq.between(Summary.first_seq, Summary.last_seq),
    )
    links = (
        select(
            Summary.id.label("summary_id"),
            func.count(SummaryMessage.message_id).label("linked"),
            func.coalesce(func.sum(case((in_range, 1), else_=0)), 0).label("in_range"),
        )
        .select_from(Summary)
        .outerjoin(SummaryMessage, SummaryMessage.summary_id == Summary.id)
        .outerjoin(Message, Message.id == SummaryMessage.message_id)
        .where(Summary.session_id == session_id)
        .group_by(Summary.id)
        .subquery()
    )
    ranges = (
        select(Summary.id.label("summary_id"), func.count(Message.id).label("range_messages"))
        .select_from(Summary)
        .outerjoin(Message, in_range)
        .where(Summary.session_id == session_id)
        .group_by(Summary.id)
        .subquery()
    )
    rows = await db.execute(
        select(links.c.summary_id, links.c.linked, links.c.in_range, ranges.c.range_messages)
        .join(ranges, ranges.c.summary_id == links.c.summary_id)
        .order_by(links.c.summary_id)
    )
    return [
        LinkStats(summary_id=int(sid), linked=int(linked), in_range=int(inr), range_messages=int(n))
        for sid, linked, inr, n in rows.tuples()
    ]


async def unlinked_in_range(db: AsyncSession, summary: Summary) -> Sample:
    """Messages inside a summary's range that it does not link."""
    linked = select(SummaryMessage.message_id).where(SummaryMessage.summary_id == summary.id)
    condition = and_(
        Message.session_id == summary.session_id,
        Message.seq.between(summary.first_seq, summary.last_seq),
        Message.id.not_in(linked),
    )
    return await _sample(db, condition)


async def linked_outside_range(db: AsyncSession, summary: Summary) -> Sample:
    """Messages a summary links that are not in its range or not of its session."""
    condition = and_(
        Message.id.in_(
            select(SummaryMessage.message_id).where(SummaryMessage.summary_id == summary.id)
        ),
        ~and_(
            Message.session_id == summary.session_id,
            Message.seq.between(summary.first_seq, summary.last_seq),
        ),
    )
    return await _sample(db, condition)


async def coverage_problems(
    db: AsyncSession, session_id: int, through_seq: int, limit: int = EXAMPLE_LIMIT
) -> tuple[int, list[CoverageProblem]]:
    """Messages with seq <= `through_seq` not linked to exactly one live summary (invariant 1).

    Returns how many there are and the first few.
    """
    live_links = func.count(Summary.id)
    per_message = (
        select(Message.id.label("id"), Message.seq.label("seq"), live_links.label("live_links"))
        .select_from(Message)
        .outerjoin(SummaryMessage, SummaryMessage.message_id == Message.id)
        .outerjoin(
            Summary,
            and_(Summary.id == SummaryMessage.summary_id, Summary.superseded_by.is_(None)),
        )
        .where(Message.session_id == session_id, Message.seq <= through_seq)
        .group_by(Message.id, Message.seq)
        .having(live_links != 1)
        .subquery()
    )
    total = int(await db.scalar(select(func.count()).select_from(per_message)) or 0)
    if total == 0:
        return 0, []
    rows = await db.execute(select(per_message).order_by(per_message.c.seq).limit(limit))
    problems = [
        CoverageProblem(message=MessageRef(id=int(mid), seq=int(seq)), live_links=int(count))
        for mid, seq, count in rows.tuples()
    ]
    return total, problems


async def _sample(db: AsyncSession, condition: Any) -> Sample:
    total = int(await db.scalar(select(func.count()).select_from(Message).where(condition)) or 0)
    if total == 0:
        return Sample(total=0, examples=[])
    rows = await db.execute(
        select(Message.id, Message.seq).where(condition).order_by(Message.seq).limit(EXAMPLE_LIMIT)
    )
    return Sample(
        total=total, examples=[MessageRef(id=int(mid), seq=int(seq)) for mid, seq in rows.tuples()]
    )
