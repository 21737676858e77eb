"""Removal: a message becomes a tombstone, the other half of its tool-call exchange is hidden,
and every summary the removed message reached is erased.

A removed message keeps its row and seq, with no content left: seqs never move, so summary
ranges, links and cursors stay valid. Removing one half of a tool exchange (a call, or one of
its results) orphans the rest of it: kept as appended but shown nowhere, since no view may
hold a call without its results or a result without its call; it can be removed (or popped)
in turn, so a client undoing its newest items one by one gets each back as it added it.

The summaries a removed message reached hold its facts: those whose range covers it (its
leaf, the nodes above it, the cover shown over them), those made before the forest that end
after it (then a summary was made with the one before it as context, so a fact travelled
forward), and every summary that absorbed one of them. They lose their text and prompt and
stop being live; what they had absorbed that the removal did not reach is live again. The rest
of the session's summaries stay: the range of the erased leaf is a hole between live summaries,
loaded raw until the background job makes its leaf again and the erased nodes above it.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, case, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import MESSAGES, SUMMARIES, Message, Session, Summary, SummaryMessage, utcnow
from api.errors import SessionGone
from api.items import joins_next
from api.store.rows import MESSAGE_COLUMNS, SUMMARY_COLUMNS, MessageRow, SummaryRow, live, shown
from api.store.summaries import holes, live_summaries, open_holes

_messages = MESSAGES.c
_summaries = SUMMARIES.c

CALL_SEARCH_PAGE = 64
"""Assistant messages read per round trip while looking back for a tool result's call."""


@dataclass(frozen=True)
class Removal:
    """What a removal did: `message` as it was appended, the rest of its tool-call exchange
    that is hidden now (`orphaned`), and how many summaries it erased."""

    message: MessageRow
    orphaned: list[MessageRow]
    erased_summaries: int


async def remove(db: AsyncSession, session_key: int, message_id: int | None) -> Removal | None:
    """Remove one message of the session (its id, or the newest remaining one when None) and
    hide the rest of its tool-call exchange; None when there is no such message left.

    Locks the session row first, as an append and a summary's save do: a summary whose
    sources lost a message meanwhile cannot be saved (`save_summary` recounts them).
    """
    locked = await db.scalar(
        update(Session)
        .where(Session.id == session_key)
        .values(updated_at=utcnow())
        .returning(Session.id)
    )
    if locked is None:
        raise SessionGone("the session no longer exists")
    target = await _target(db, session_key, message_id)
    if target is None:
        return None
    orphaned = [m for m in await _exchange_of(db, session_key, target) if m.orphaned_at is None]
    linked = await _linked(db, target)
    now = utcnow()
    await db.execute(
        update(Message)
        .where(Message.session_id == session_key, Message.id == target.id)
        .values(
            removed_at=now,
            content=None,
            content_parts=None,
            name=None,
            tool_calls=None,
            tool_call_id=None,
            metadata_=None,
            client_id=None,
            token_count=0,
            item=None,
        )
    )
    if orphaned:
        await db.execute(
            update(Message)
            .where(
                Message.session_id == session_key,
                Message.id.in_([message.id for message in orphaned]),
            )
            .values(orphaned_at=now)
        )
    await db.execute(
        update(Session)
        .where(Session.id == session_key)
        .values(removed_count=Session.removed_count + 1)
    )
    reached = await _reached(db, session_key, target.seq) if linked else []
    erased = await _erase(db, session_key, reached, now)
    return Removal(target, orphaned, len(erased))


async def _linked(db: AsyncSession, message: MessageRow) -> bool:
    """Whether any summary (live or not) covers the message."""
    links = select(SummaryMessage.message_id).where(
        SummaryMessage.session_id == message.session_id, SummaryMessage.message_id == message.id
    )
    return bool(await db.scalar(select(links.exists())))


async def _target(db: AsyncSession, session_key: int, message_id: int | None) -> MessageRow | None:
    query = select(*MESSAGE_COLUMNS).where(
        _messages.session_id == session_key, _messages.removed_at.is_(None)
    )
    if message_id is None:
        query = query.order_by(_messages.seq.desc()).limit(1)
    else:
        query = query.where(_messages.id == message_id)
    row = (await db.execute(query)).first()
    return None if row is None else MessageRow._make(row)


async def message_exists(db: AsyncSession, session_key: int, message_id: int) -> bool:
    """Whether the session ever held the message (a tombstone counts)."""
    found = await db.scalar(
        select(_messages.id).where(_messages.session_id == session_key, _messages.id == message_id)
    )
    return found is not None


async def _exchange_of(db: AsyncSession, session_key: int, message: MessageRow) -> list[MessageRow]:
    """The rest of the tool exchange `message` belongs to, removed ones left out: for a call,
    its results; for a result, its call and the call's other results; with the Responses
    `reasoning` item that led to the call (the API refuses either without the other). An
    orphaned message's exchange is hidden already."""
    if message.orphaned_at is not None:
        return []
    call: MessageRow | None = message
    if message.role == "tool" and message.tool_call_id is not None:
        call = await _call_answered_by(db, session_key, message)
    elif message.item is not None and joins_next(message.item):
        call = await _shown_beside(db, session_key, message.seq, before=False)
    if call is None or call.role != "assistant" or not call.tool_calls:
        return []
    exchange = [call, *await _results_of(db, session_key, call)]
    before = await _shown_beside(db, session_key, call.seq, before=True)
    if before is not None and before.item is not None and joins_next(before.item):
        exchange.insert(0, before)
    return [row for row in exchange if row.id != message.id]


async def _results_of(db: AsyncSession, session_key: int, call: MessageRow) -> list[MessageRow]:
    """The results answering `call`'s tool calls: for each call id, the results after the call
    and before the next call reusing that id (ids need only be unique within a message)."""
    open_ids = {str(tool_call["id"]) for tool_call in call.tool_calls or ()}
    results: list[MessageRow] = []
    exchange_rows = or_(_messages.role == "tool", _messages.tool_calls.is_not(None))
    async for row in _scan(db, session_key, call.seq, exchange_rows, before=False):
        if row.role == "tool" and row.tool_call_id in open_ids:
            results.append(row)
        for tool_call in row.tool_calls or ():
            open_ids.discard(str(tool_call.get("id")))
        if not open_ids:
            break
    return results


async def _call_answered_by(
    db: AsyncSession, session_key: int, result: MessageRow
) -> MessageRow | None:
    """The newest assistant message before `result` that made the call it answers."""
    calls = and_(_messages.role == "assistant", _messages.tool_calls.is_not(None))
    async for candidate in _scan(db, session_key, result.seq, calls, before=True):
        if any(call.get("id") == result.tool_call_id for call in candidate.tool_calls or ()):
            return candidate
    return None


async def _scan(
    db: AsyncSession, session_key: int, seq: int, where: ColumnElement[bool], *, before: bool
) -> AsyncIterator[MessageRow]:
    """The session's messages matching `where` that are not removed, before `seq` (newest
    first) or after it (oldest first), read a page at a time."""
    while True:
        side = _messages.seq < seq if before else _messages.seq > seq
        query = select(*MESSAGE_COLUMNS).where(
            _messages.session_id == session_key, side, _messages.removed_at.is_(None), where
        )
        order = _messages.seq.desc() if before else _messages.seq
        rows = await db.execute(query.order_by(order).limit(CALL_SEARCH_PAGE))
        page = [MessageRow._make(row) for row in rows]
        for message in page:
            yield message
        if len(page) < CALL_SEARCH_PAGE:
            return
        seq = page[-1].seq


async def _shown_beside(
    db: AsyncSession, session_key: int, seq: int, *, before: bool
) -> MessageRow | None:
    """The nearest shown message before (or after) `seq`."""
    side = _messages.seq < seq if before else _messages.seq > seq
    order = _messages.seq.desc() if before else _messages.seq
    query = select(*MESSAGE_COLUMNS).where(
        _messages.session_id == session_key, side, shown(_messages)
    )
    row = (await db.execute(query.order_by(order).limit(1))).first()
    return None if row is None else MessageRow._make(row)


async def _reached(db: AsyncSession, session_key: int, seq: int) -> list[SummaryRow]:
    """The summaries a removal of the message at `seq` erases, by range: not erased yet, and
    covering `seq`, or made before the forest (no `metadata.kind`) and ending after it, or
    absorbing one of those (see the module's docstring)."""
    rows = [
        SummaryRow._make(row)
        for row in await db.execute(
            select(*SUMMARY_COLUMNS)
            .where(
                _summaries.session_id == session_key,
                _summaries.last_seq >= seq,
                _summaries.erased_at.is_(None),
            )
            .order_by(_summaries.first_seq, _summaries.id)
        )
    ]
    by_id = {row.id: row for row in rows}
    reached = {row.id for row in rows if row.first_seq <= seq or "kind" not in (row.metadata or {})}
    for summary_id in list(reached):
        parent = by_id[summary_id].superseded_by
        while parent in by_id and parent not in reached:
            reached.add(parent)
            parent = by_id[parent].superseded_by
    return [row for row in rows if row.id in reached]


async def _erase(
    db: AsyncSession, session_key: int, reached: list[SummaryRow], now: datetime
) -> list[SummaryRow]:
    """Erase the `reached` summaries, then make live again what a now-erased summary had
    absorbed and the removal did not reach. Returns `reached`."""
    if not reached:
        return reached
    await db.execute(
        update(Summary)
        .where(
            Summary.session_id == session_key,
            Summary.id.in_([summary.id for summary in reached]),
        )
        .values(erased_at=now, summary_text="", summary_prompt="")
    )
    parent = Summary.__table__.alias("parent")
    await db.execute(
        update(Summary)
        .where(
            Summary.session_id == session_key,
            Summary.erased_at.is_(None),
            exists().where(
                and_(
                    parent.c.session_id == session_key,
                    parent.c.id == Summary.superseded_by,
                    parent.c.erased_at.is_not(None),
                )
            ),
        )
        .values(superseded_by=None)
    )
    return reached


@dataclass(frozen=True)
class RemovalPreview:
    """What removing a message would do, read without changing anything: the summaries it
    would erase (`_reached`), and the ranges the erasure job would summarize again."""

    seq: int
    erased: list[SummaryRow]
    """The summaries the removal would erase, oldest first."""
    after_seq: int
    """Where the first range to summarize again starts after."""
    messages: int
    """Shown messages of those ranges, the removed one left out."""
    tokens: int
    """Their stored token counts."""


async def removal_preview(
    db: AsyncSession, session_key: int, message_id: int, floor: int
) -> RemovalPreview | None:
    """What `remove` would erase and leave to be made again; None when the session holds no
    such message that is not removed yet. `floor`: where summaries may start after (the
    pinned prefix)."""
    target = await _target(db, session_key, message_id)
    if target is None:
        return None
    if not await _linked(db, target):
        return RemovalPreview(target.seq, [], await _live_end(db, session_key, floor), 0, 0)
    reached = await _reached(db, session_key, target.seq)
    if not reached:  # in a hole an earlier removal opened: nothing left to erase
        return RemovalPreview(target.seq, [], await _live_end(db, session_key, floor), 0, 0)
    erased_ids = [summary.id for summary in reached]
    freed = [
        SummaryRow._make(row)
        for row in await db.execute(
            select(*SUMMARY_COLUMNS).where(
                _summaries.session_id == session_key,
                _summaries.superseded_by.in_(erased_ids),
                _summaries.erased_at.is_(None),
                _summaries.id.not_in(erased_ids),
            )
        )
    ]
    staying = [s for s in await live_summaries(db, session_key) if s.id not in erased_ids]
    after = [*staying, *freed]
    ranges = holes(after, floor)
    end = max((summary.last_seq for summary in after), default=floor)
    reached_end = max(summary.last_seq for summary in reached)
    if reached_end > end:
        ranges.append((end + 1, reached_end))
    in_ranges = or_(*(Message.seq.between(first, last) for first, last in ranges))
    count, tokens = (
        await db.execute(
            select(func.count(), func.coalesce(func.sum(Message.token_count), 0)).where(
                Message.session_id == session_key,
                in_ranges,
                Message.id != target.id,
                shown(Message),
            )
        )
    ).one()
    after_seq = ranges[0][0] - 1 if ranges else end
    return RemovalPreview(target.seq, reached, after_seq, int(count), int(tokens))


async def _live_end(db: AsyncSession, session_key: int, floor: int) -> int:
    end = await db.scalar(
        select(func.max(Summary.last_seq)).where(Summary.session_id == session_key, live(Summary))
    )
    return max(int(end or 0), floor)


async def remake_owed(db: AsyncSession, session_key: int, floor: int) -> bool:
    """Whether erased summaries left a range no live summary covers that holds a shown
    message: a hole between live summaries, or seqs after the newest live summary that an
    erased one had covered. Loaded raw until a summary is made of it again."""
    live_rows = await live_summaries(db, session_key)
    ends = select(
        func.max(case((Summary.erased_at.is_not(None), Summary.last_seq))),
    ).where(Summary.session_id == session_key)
    erased_end = await db.scalar(ends)
    live_end = max((summary.last_seq for summary in live_rows), default=0)
    if erased_end is not None and erased_end > live_end:
        return True
    return bool(await open_holes(db, session_key, holes(live_rows, floor)))
