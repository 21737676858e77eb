"""The history load's walk back through the unsummarized tail under a token budget
(`api.store.loader`): the pages below the first, and the count of messages it left unread.

Every read names a seq window as well as a LIMIT, so no statement's cost depends on planner
statistics (`tests/store/test_unanalyzed_plans.py`).
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import BigInteger, ColumnElement, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import MESSAGES
from api.items import joins_next
from api.store.rows import MESSAGE_COLUMNS, UNBOUNDED, MessageRow, SessionRow, hidden, shown

TAIL_PAGE_SIZE = 64
"""Messages the first round trip reads when the loader walks back from the newest under a
token budget (the usual budget is covered by it)."""

MAX_TAIL_PAGE = 1024
"""Most messages a later round trip of the walk reads (as many as the rest of the budget
takes: `_TAIL_PAGE`), so a large budget costs a few round trips."""

_messages = MESSAGES.c


def _shown_from(lowest: ColumnElement[bool]) -> tuple[ColumnElement[bool], ...]:
    """The shown messages of the session below `before_seq`, from the one lower bound `lowest`
    (a single lower bound, so SQLite's index range starts at it)."""
    return (
        _messages.session_id == bindparam("session_id"),
        lowest,
        _messages.seq < bindparam("before_seq"),
        shown(_messages),
    )


_sizes = (
    select(
        _messages.seq,
        _messages.token_count,
        func.sum(_messages.token_count).over(order_by=_messages.seq.desc()).label("running"),
    )
    .where(*_shown_from(_messages.seq > bindparam("after_seq")))
    .order_by(_messages.seq.desc())
    .limit(bindparam("rows"))
    .subquery("sizes")
)
_lowest_wanted = (
    select(func.min(_sizes.c.seq))
    .where(_sizes.c.running - _sizes.c.token_count <= bindparam("tokens", type_=BigInteger))
    .scalar_subquery()
)
_TAIL_PAGE = (
    select(*MESSAGE_COLUMNS)
    # when no row is wanted, the range is empty
    .where(*_shown_from(_messages.seq >= func.coalesce(_lowest_wanted, bindparam("before_seq"))))
    .order_by(_messages.seq.desc())
    .limit(bindparam("rows"))
)
"""A page of the walk back: the newest messages of a window, down to the one whose token count
passes `tokens` (the rest of the budget). The sizes are summed first, from the rows' counts
alone, so a page holds what the budget takes (and one message more), never a thousand large
messages that a page of small ones would have suggested."""


_HIDDEN_BETWEEN = select(func.count()).where(
    _messages.session_id == bindparam("session_id"),
    _messages.seq > bindparam("after_seq"),
    _messages.seq < bindparam("before_seq"),
    hidden(_messages),
)
"""Read through the partial index of hidden messages: as many rows as were removed, however
many seqs lie between."""


async def not_loaded(
    db: AsyncSession, session: SessionRow, after_seq: int, messages: list[MessageRow]
) -> int:
    """How many messages lie between `after_seq` and the oldest loaded one: the seqs between
    them, less the hidden ones (tombstones keep seqs) if the session has removed messages."""
    before_seq = messages[0].seq if messages else session.last_seq + 1
    between = before_seq - after_seq - 1
    if between <= 0 or not session.removed_count:
        return max(between, 0)
    params = {"session_id": session.id, "after_seq": after_seq, "before_seq": before_seq}
    return between - int((await driver.read(db, _HIDDEN_BETWEEN, params))[0][0])


class Window(NamedTuple):
    """Seqs a page of the tail is read from: after `floor`, before `before`, at most `rows`.

    Every read names its lower bound, so even a plan that reads its whole range reads a bounded
    one. The window below one that came back short (hidden messages keep their seqs) is twice
    as wide, so a long run of tombstones costs a few round trips, not one per page."""

    floor: int
    before: int
    width: int
    rows: int

    def below(self, page: list[MessageRow], after_seq: int, cut: bool, rows: int) -> Window | None:
        """The next window down, of at most `rows`, after `page` (newest first) was read from
        this one (`cut`: the page ended at the budget, not at its window's end); None when none
        is left above `after_seq`."""
        if cut or len(page) == self.rows:
            before = page[-1].seq
            return Window(max(after_seq, before - 1 - rows), before, rows, rows)
        if self.floor <= after_seq:
            return None
        width = 2 * self.width
        return Window(max(after_seq, self.floor - width), self.floor + 1, width, self.rows)


async def walk_back(
    db: AsyncSession,
    session_key: int,
    after_seq: int,
    budget: int,
    page: list[MessageRow],
    window: Window,
) -> list[MessageRow]:
    """The messages of `page` (the newest, descending, read from `window`) and of the windows
    below it, until their token counts pass `budget` at a message that is not a tool result,
    and no Responses `reasoning` item is left behind the item it led to; ascending.

    Below the first page, a page reads up to MAX_TAIL_PAGE messages, as many as the rest of the
    budget takes; past the budget (a tool call's results, a reasoning item's item), a first
    page's worth at a time."""
    loaded: list[MessageRow] = []
    total = 0
    passed = False
    while True:
        before_page = total
        for message in page:
            if passed and not _leads_to_next(message):
                loaded.reverse()
                return loaded
            loaded.append(message)
            total += message.token_count
            passed = passed or (total > budget and message.role != "tool")
        # past the budget, a chat message needs no look at the one before it
        cut = before_page <= budget < total
        rows = TAIL_PAGE_SIZE if total > budget else MAX_TAIL_PAGE
        next_window = window.below(page, after_seq, cut, rows)
        if next_window is None or (passed and loaded and loaded[-1].item is None):
            loaded.reverse()
            return loaded
        window = next_window
        params = {
            "session_id": session_key,
            "after_seq": window.floor,
            "before_seq": window.before,
            "rows": window.rows,
            "tokens": budget - total if total <= budget else UNBOUNDED,
        }
        # a page larger than the first is read in SQLite's driver thread, off the event loop
        rows_read = await driver.read(db, _TAIL_PAGE, params, paged=window.rows <= TAIL_PAGE_SIZE)
        page = [MessageRow._make(row) for row in rows_read]


def _leads_to_next(message: MessageRow) -> bool:
    return message.item is not None and joins_next(message.item)
