"""The history load: the session's latest live summaries and the messages after them, read
and assembled under a token budget (`api.context`); over it, one inline summarization first.
The history route answers it as a `History` (`LoadedContext.history`); a model turn sends its
context as it is."""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.context import AssembledContext, loaded_context, session_format, shown_summaries
from api.context_edits import ContextEdits, EditOverrides
from api.db.faults import describe_fault
from api.db.transactions import connection_lost_or_commit_unknown, retrying
from api.errors import SummarizationInProgress
from api.schemas import Cleared, History, MessageFormat, MessageOut, Omitted, SummaryOut
from api.summarization import Summarization
from api.summary_jobs import schedule_summary

logger = logging.getLogger("precis.service")

INLINE_WAIT_SECONDS = 30.0
"""How long an over-budget history load waits for a running summarization before truncating."""


@dataclass(frozen=True)
class LoadedContext:
    """A history load: the rows read and the context assembled from them. A model turn sends
    `context` as it is; `history()` makes the history route's answer of it."""

    start: store.HistoryStart
    rows: store.LoadedRows
    """The rows shown: the live summaries `summary_limit` keeps, their holes, the tail."""
    context: AssembledContext
    summarization_pending: bool

    def history(self) -> History:
        session = self.start.session
        rows = self.rows
        return History(
            session_id=session.external_id,
            pinned=[MessageOut.from_row(message) for message in rows.pinned],
            summaries=[
                SummaryOut.from_row(summary, session.external_id) for summary in rows.summaries
            ],
            messages=[MessageOut.from_row(message) for message in [*rows.holes, *rows.messages]],
            context=self.context.messages,
            token_estimate=self.context.token_estimate,
            truncated_messages=self.context.truncated_messages,
            omitted=Omitted.model_validate(self.context.omitted.as_json()),
            cleared=self.cleared(),
            summarization_pending=self.summarization_pending,
        )

    def cleared(self) -> list[Cleared]:
        """The parts context editing showed as placeholders."""
        return [Cleared.model_validate(asdict(part)) for part in self.context.cleared]


async def fitted_context(
    db: AsyncSession,
    summarization: Summarization,
    tenant: str,
    external_id: str,
    summary_limit: int | None,
    max_tokens: int | None,
    message_format: MessageFormat | None = None,
    start: store.HistoryStart | None = None,
    edits: EditOverrides | None = None,
) -> LoadedContext:
    """The history loader; over `max_tokens`, summarize inline once (if enabled), then truncate.
    `message_format`: the format of `context` (None: the session's own); `start`: the
    session as `store.session_for_history` just read it in `db` (read here when None);
    `edits`: the request's overrides of the session's context editing."""
    if start is None:
        start = await store.session_for_history(db, tenant, external_id)
    policy = summarization.settings.policy(start.session.settings)
    loaded = await load_context(
        db, summarization, start, summary_limit, max_tokens, message_format, edits
    )
    if (
        max_tokens is not None
        and loaded.context.over_budget
        and policy.dynamic_summary_enabled
        and policy.retry_on_context_overflow
    ):
        await db.close()  # the read hands its connection back while the LLM works
        with suppress(SummarizationInProgress):
            try:
                summarizing = partial(
                    summarization.run,
                    start.session.id,
                    "proactive",
                    "token_limit",
                    wait_seconds=INLINE_WAIT_SECONDS,
                    keep_pending_turn=True,
                )
                async with asyncio.timeout(summarization.settings.summary_inline_deadline_seconds):
                    await retrying(summarizing, "an inline summarization", "summarization")
            except Exception as exc:
                if not isinstance(exc, TimeoutError) and not connection_lost_or_commit_unknown(exc):
                    raise
                # Past its deadline (the chat turn cannot wait), or losing its database
                # connection until the retry budget was spent: answer the truncated
                # context, summarize in the background.
                if not isinstance(exc, TimeoutError):
                    logger.warning(
                        "an inline summarization kept losing its database connection; answering "
                        "the truncated context: %s",
                        describe_fault(exc),
                    )
                session_key = start.session.id

                async def record_job() -> None:  # in summarization's own unit of work
                    async with summarization.database.transaction() as job_db:
                        await schedule_summary(job_db, session_key, "token_limit")

                await retrying(record_job, "scheduling a summarization", "summarization")
                return replace(loaded, summarization_pending=True)
            # One summarization only: whatever it achieved, truncation does the rest. Loaded
            # again even when it stored nothing: it may have waited for another run (a
            # background job) that stored the summary of what the first load cut.
            start = await store.session_for_history(db, tenant, external_id)
            loaded = await load_context(
                db, summarization, start, summary_limit, max_tokens, message_format, edits
            )
    return loaded


async def load_context(
    db: AsyncSession,
    summarization: Summarization,
    start: store.HistoryStart,
    summary_limit: int | None,
    max_tokens: int | None,
    message_format: MessageFormat | None = None,
    edit_overrides: EditOverrides | None = None,
) -> LoadedContext:
    """Latest live summaries and the messages after them, assembled under `max_tokens`, in
    `message_format` (None: the session's own, chat messages until it holds any), with the
    session's context editing (`edit_overrides` on top).

    Every live summary is shown (more than the session's `summary_limit` only while a roll-up
    is owed), or the newest `summary_limit` when one is asked for: `omitted.summaries` then
    names the older ones, so nothing is left out without a word."""
    session = start.session
    policy = summarization.settings.policy(session.settings)
    edits = ContextEdits.of(policy, edit_overrides)
    # which parts are cleared depends on the whole unsummarized tail: then it is all read
    read_budget = None if edits.active else max_tokens
    rows = await store.load_rows(
        db, session, store.EVERY_LIVE_SUMMARY, read_budget, summarized=start.summarized
    )
    rows, left_out, left_out_messages = shown_summaries(rows, summary_limit)
    message_format = message_format or session_format(session)
    context = loaded_context(rows, max_tokens, message_format, edits, left_out, left_out_messages)
    pending = start.job_pending or summarization.locks.is_held(session.id)
    return LoadedContext(start, rows, context, pending)
