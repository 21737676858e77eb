"""The compact endpoint's use case: summarize a session now, inline, within a deadline, and
answer the summary with the history after it; with `dry_run`, what it would store, stored
nowhere."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.context import loaded_context, session_format
from api.context_edits import ContextEdits
from api.errors import SessionNotFound, SummarizationTimeout
from api.history_load import load_context
from api.schemas import (
    CompactPreview,
    CompactRequest,
    CompactResponse,
    CompactResult,
    NothingStored,
    SummaryDraftOut,
    SummaryOut,
)
from api.summarization import Summarization
from api.summary_plans import Plan

COMPACT_WAIT_SECONDS = 60.0
"""How long `compact` waits for a running summarization of the session before answering 409."""

Done = TypeVar("Done")


async def compact(
    db: AsyncSession,
    summarization: Summarization,
    tenant: str,
    external_id: str,
    body: CompactRequest,
) -> CompactResponse:
    """Summarize now, inline; waits (bounded) for a running summarization of the session.
    With `dry_run`, what it would store, stored nowhere (`preview_compact`)."""
    session = await store.get_session(db, tenant, external_id)
    keep_last_n = 0 if body.trigger == "overflow_retry" else body.keep_last_n
    if body.dry_run:
        return await preview_compact(db, summarization, session, body, keep_last_n)
    summarized_to = await _summarized_to(db, session.id)
    await db.close()  # the read hands its connection back while the LLM works
    summary = await _within_compact_deadline(
        summarization,
        partial(
            summarization.run,
            session.id,
            body.trigger,
            body.trigger,
            keep_last_n,
            wait_seconds=COMPACT_WAIT_SECONDS,
            keep_pending_turn=body.trigger == "overflow_retry",
            instructions=body.instructions,
        ),
    )
    # 404 if deleted meanwhile
    start = await store.session_for_history(db, tenant, external_id)
    loaded = (await load_context(db, summarization, start, None, None)).history()
    if summary is not None:
        made = SummaryOut.from_row(summary, session.external_id)
        return CompactResult(summary=made, reason=None, history=loaded)
    # another summarization, which this one waited for, may have taken the range
    taken = await _summarized_to(db, session.id) > summarized_to
    reason: NothingStored = "already_summarized" if taken else "nothing_to_summarize"
    return CompactResult(summary=None, reason=reason, history=loaded)


async def _summarized_to(db: AsyncSession, session_key: int) -> int:
    """The last seq the session's newest live summary covers (0 without one)."""
    newest = await store.live_summaries(db, session_key, limit=1)
    return newest[-1].last_seq if newest else 0


async def _within_compact_deadline(
    summarization: Summarization, work: Callable[[], Awaitable[Done]]
) -> Done:
    """`work` cut short at SUMMARY_COMPACT_DEADLINE_SECONDS: `SummarizationTimeout`."""
    deadline = summarization.settings.summary_compact_deadline_seconds
    try:
        async with asyncio.timeout(deadline):
            return await work()
    except TimeoutError as exc:
        raise SummarizationTimeout(
            f"the summarization did not finish within {deadline:g} s "
            "(SUMMARY_COMPACT_DEADLINE_SECONDS); nothing was stored, retry later"
        ) from exc


async def preview_compact(
    db: AsyncSession,
    summarization: Summarization,
    session: store.SessionRow,
    body: CompactRequest,
    keep_last_n: int | None,
) -> CompactPreview:
    """`compact` with `dry_run`: the summary and roll-ups a real call would store now, made
    as it makes them (`Summarization.preview`), and the context a load without `max_tokens`
    would then answer; nothing is stored, under the same deadline."""
    await db.close()  # the read hands its connection back while the LLM works
    preview = await _within_compact_deadline(
        summarization,
        partial(
            summarization.preview,
            session.id,
            body.trigger,
            body.trigger,
            keep_last_n,
            keep_pending_turn=body.trigger == "overflow_retry",
            instructions=body.instructions,
        ),
    )
    if preview is None:
        raise SessionNotFound(session.external_id)
    plan = preview.plan
    pinned_seq = plan.session.pinned_seq
    pinned = await store.messages_in_range(db, session.id, 0, pinned_seq) if pinned_seq else []
    rows = previewed_rows(plan, preview.live, pinned)
    edits = ContextEdits.of(plan.policy)
    context = loaded_context(rows, None, session_format(plan.session), edits)
    made = preview.summary
    return CompactPreview(
        summary=None if made is None else SummaryDraftOut.from_row(made),
        reason=None if made is not None else "nothing_to_summarize",
        rollups=[SummaryDraftOut.from_row(rollup) for rollup in preview.rollups],
        context=context.messages,
        token_estimate=context.token_estimate,
    )


def previewed_rows(
    plan: Plan, live: list[store.SummaryRow], pinned: list[store.MessageRow]
) -> store.LoadedRows:
    """What a load without `max_tokens` (`store.load_rows`) would read once `live` are the
    session's live summaries, taken from what a preview read: `plan`'s messages, and the
    pinned prefix (`pinned`), shown unless a loaded summary covers it."""
    summaries = live
    if any(summary.first_seq <= plan.session.pinned_seq for summary in summaries):
        pinned = []
    after_seq = summaries[-1].last_seq if summaries else plan.session.pinned_seq
    tail = [message for message in plan.messages if message.seq > after_seq]
    return store.LoadedRows(pinned, summaries, tail, after_seq)
