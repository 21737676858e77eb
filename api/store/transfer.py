"""A session moved as JSON Lines (`api.transfer`): the reads of an export and the writes of an
import.

An export reads a page at a time, every statement scoped to the one session: messages by a
window of seqs (`(session_id, seq)`), summaries by a keyset on `(last_seq, level, id)` from
the `(session_id, last_seq)` index, and the seqs a page of summaries covers, run together into
ranges by the database (the links are never read into memory). An import writes rows the file
already numbered: the session row with its counters, messages in batches, each summary with its
ends and links found by seq.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    func,
    insert,
    literal,
    or_,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from api.db.models import MESSAGES, SESSIONS, SUMMARIES, Message, SummaryMessage
from api.store.keys import new_id, session_key
from api.store.rows import MESSAGE_COLUMNS, SUMMARY_COLUMNS, MessageRow, SummaryRow

_messages = MESSAGES.c
_summaries = SUMMARIES.c

RANGES_PER_LINK_STATEMENT = 100
"""Covered seq ranges linked by one INSERT: a summary's ranges are few unless removals riddle
it; more per statement would grow its text for little."""

# --- export ---------------------------------------------------------------------------------

_MESSAGE_WINDOW = (
    select(*MESSAGE_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq > bindparam("after_seq"),
        _messages.seq <= bindparam("through_seq"),
    )
    .order_by(_messages.seq)
)


async def message_window(
    db: AsyncSession, session_key: int, after_seq: int, through_seq: int
) -> list[MessageRow]:
    """Every message of seqs `after_seq + 1..through_seq`, tombstones and orphans included,
    ascending: an index range scan of exactly that window (seqs have no gaps)."""
    params = {"session_id": session_key, "after_seq": after_seq, "through_seq": through_seq}
    return [MessageRow._make(row) for row in await db.execute(_MESSAGE_WINDOW, params)]


class SummaryPosition(NamedTuple):
    """Where a page of summaries ended: the export's order is `last_seq` and `level`
    descending (a roll-up before what it absorbed), then `id` ascending."""

    last_seq: int
    level: int
    id: int


class ExportedSummary(NamedTuple):
    """A summary with the seqs of its first and last message (its ends' ids, as seqs)."""

    row: SummaryRow
    first_message_seq: int
    last_message_seq: int

    @property
    def position(self) -> SummaryPosition:
        return SummaryPosition(self.row.last_seq, self.row.level, self.row.id)


_first = aliased(Message)
_last = aliased(Message)


async def summary_page(
    db: AsyncSession, session_key: int, after: SummaryPosition | None, limit: int
) -> list[ExportedSummary]:
    """The next `limit` summaries of the session after `after` (from the start when None),
    in the export's order."""
    query = (
        select(*SUMMARY_COLUMNS, _first.seq, _last.seq)
        .outerjoin(
            _first,
            and_(_first.session_id == session_key, _first.id == _summaries.first_message_id),
        )
        .outerjoin(
            _last, and_(_last.session_id == session_key, _last.id == _summaries.last_message_id)
        )
        .where(_summaries.session_id == session_key)
    )
    if after is not None:
        query = query.where(
            _summaries.last_seq <= after.last_seq,
            or_(
                _summaries.last_seq < after.last_seq,
                _summaries.level < after.level,
                and_(_summaries.level == after.level, _summaries.id > after.id),
            ),
        )
    query = query.order_by(
        _summaries.last_seq.desc(), _summaries.level.desc(), _summaries.id
    ).limit(limit)
    page: list[ExportedSummary] = []
    for *values, first_seq, last_seq in await db.execute(query):
        row = SummaryRow._make(values)
        # an end message is never deleted but with its session; the range's end stands in
        page.append(
            ExportedSummary(
                row,
                row.first_seq if first_seq is None else int(first_seq),
                row.last_seq if last_seq is None else int(last_seq),
            )
        )
    return page


async def covered_ranges(
    db: AsyncSession, session_key: int, summary_ids: Sequence[int]
) -> dict[int, list[tuple[int, int]]]:
    """The seqs each summary links, as ascending runs `(first, last)`: consecutive seqs share
    `seq - row_number()`, so the database groups them and only the runs come back."""
    if not summary_ids:
        return {}
    numbered = (
        select(
            SummaryMessage.summary_id.label("summary_id"),
            Message.seq.label("seq"),
            (
                Message.seq
                - func.row_number().over(
                    partition_by=SummaryMessage.summary_id, order_by=Message.seq
                )
            ).label("run"),
        )
        .join(
            Message,
            and_(Message.session_id == session_key, Message.id == SummaryMessage.message_id),
        )
        .where(SummaryMessage.session_id == session_key, SummaryMessage.summary_id.in_(summary_ids))
        .subquery()
    )
    runs = await db.execute(
        select(numbered.c.summary_id, func.min(numbered.c.seq), func.max(numbered.c.seq))
        .group_by(numbered.c.summary_id, numbered.c.run)
        .order_by(numbered.c.summary_id, func.min(numbered.c.seq))
    )
    found: dict[int, list[tuple[int, int]]] = {summary_id: [] for summary_id in summary_ids}
    for summary_id, first, last in runs:
        found[int(summary_id)].append((int(first), int(last)))
    return found


# --- import ---------------------------------------------------------------------------------


async def insert_session(db: AsyncSession, tenant: str, values: Mapping[str, Any]) -> int | None:
    """INSERT a session with every column given (`values`, by column name, `external_id`
    included); its session key, or None when the tenant already has that session id."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    result = await db.execute(
        dialect.insert(SESSIONS)
        .values(id=session_key(tenant, values["external_id"]), tenant=tenant, **values)
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(SESSIONS.c.id)
    )
    key = result.scalar()
    return None if key is None else int(key)


async def insert_messages(db: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> bool:
    """INSERT a batch of messages (`rows`: their columns by name, `session_id` and `seq`
    included) in one round trip, under a savepoint; False, with none of them stored, when one
    repeats a `client_id` the session holds (its unique index refused it: asking the index
    first would cost a read per batch that the planner, with no statistics for rows this
    transaction wrote, may answer with a scan of them all)."""
    # run once per row (no RETURNING), so each row's id is the next after the one before
    ids = new_id(db.get_bind().dialect.name, MESSAGES)
    try:
        async with db.begin_nested():
            await db.execute(insert(MESSAGES).values(**ids), list(rows))
    except IntegrityError:
        return False
    return True


async def client_ids_taken(
    db: AsyncSession, session_key: int, client_ids: Sequence[str]
) -> set[str]:
    """Those of `client_ids` the session's stored messages hold already (the unique index on
    `(session_id, client_id)`): read once a batch was refused, to name the line."""
    if not client_ids:
        return set()
    rows = await db.scalars(
        select(_messages.client_id).where(
            _messages.session_id == session_key, _messages.client_id.in_(client_ids)
        )
    )
    return set(rows)


def _message_id_at(session_key: int, seq: int) -> Any:
    return (
        select(_messages.id)
        .where(_messages.session_id == session_key, _messages.seq == seq)
        .scalar_subquery()
    )


async def insert_summary(
    db: AsyncSession,
    session_key: int,
    values: Mapping[str, Any],
    first_message_seq: int,
    last_message_seq: int,
) -> int:
    """INSERT a summary (`values`: its columns by name but its session and end messages),
    its ends found by seq; its id."""
    result = await db.execute(
        insert(SUMMARIES)
        .values(
            session_id=session_key,
            first_message_id=_message_id_at(session_key, first_message_seq),
            last_message_id=_message_id_at(session_key, last_message_seq),
            **values,
            **new_id(db.get_bind().dialect.name, SUMMARIES),
        )
        .returning(_summaries.id)
    )
    return int(result.scalar_one())


async def link_ranges(
    db: AsyncSession, summary_id: int, session_key: int, ranges: Sequence[tuple[int, int]]
) -> None:
    """Link the summary to the session's messages of the seq `ranges`, found by seq (an index
    range scan per range), a bounded number of ranges per statement."""
    for start in range(0, len(ranges), RANGES_PER_LINK_STATEMENT):
        chunk = ranges[start : start + RANGES_PER_LINK_STATEMENT]
        await db.execute(
            insert(SummaryMessage).from_select(
                ["session_id", "summary_id", "message_id"],
                select(
                    literal(session_key, BigInteger), literal(summary_id, BigInteger), _messages.id
                ).where(
                    _messages.session_id == session_key,
                    or_(*(_messages.seq.between(first, last) for first, last in chunk)),
                ),
            )
        )
