"""Use cases of the service: what each route does, between the HTTP layer and the store."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from contextlib import suppress
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession

from api import metrics, store
from api.compaction import Compactor, Reason, schedule_if_due
from api.context import Item, assemble, openai_message, summary_message
from api.db.faults import connection_lost, describe_fault
from api.db.models import Message, Session, Summary
from api.db.transactions import (
    RETRY_PAUSE_SECONDS,
    CommitInterrupted,
    Database,
    cut_off,
    retrying,
)
from api.errors import (
    BadRequest,
    PayloadTooLarge,
    SummarizationInProgress,
    SummarizationTimeout,
)
from api.locks import CompactionBusy
from api.schemas import (
    AppendResponse,
    CompactRequest,
    CompactResponse,
    History,
    MessageIn,
    MessageOut,
    SessionCreate,
    SessionOut,
    SessionUpdate,
    SummarizationStatus,
    SummaryDetail,
    SummaryOut,
)
from api.settings import Settings
from summarizer.text import OFFLOAD_CHARS
from summarizer.tokens import count_message

APPEND_ATTEMPTS = 3
"""Runs of an append's transaction at most, each on a fresh connection after the previous one
lost its connection without storing anything (a failover may cut two in a row)."""

COMMIT_STATUS_WAIT_SECONDS = 5.0
"""How long an append whose COMMIT was cut off waits for the database to say whether it
landed (the server ends the dead connection's transaction within moments)."""

COMMIT_STATUS_POLL_SECONDS = 0.05
"""How often that question is asked again while the answer is "in progress"."""

COMPACT_WAIT_SECONDS = 60.0
"""How long `compact` waits for a running summarization of the session before answering 409."""

INLINE_WAIT_SECONDS = 30.0
"""How long an over-budget history load waits for a running summarization before truncating."""

logger = logging.getLogger("precis.service")


def new_message(message: MessageIn, max_bytes: int, index: int) -> store.NewMessage:
    """Check the size limit and count tokens once, before any transaction starts."""
    payload = message.model_dump(exclude_none=True)
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    if size > max_bytes:
        raise PayloadTooLarge(f"messages[{index}] is {size} bytes; the limit is {max_bytes}")
    openai = message.openai_dict()
    content = openai.get("content")
    return store.NewMessage(
        role=message.role,
        content=content if isinstance(content, str) else None,
        content_parts=content if isinstance(content, list) else None,
        name=message.name,
        tool_calls=openai.get("tool_calls"),
        tool_call_id=message.tool_call_id,
        metadata=message.metadata,
        client_id=message.client_id,
        token_count=count_message(openai),
    )


def new_messages(messages: Sequence[MessageIn], max_bytes: int) -> list[store.NewMessage]:
    return [new_message(message, max_bytes, index) for index, message in enumerate(messages)]


MessageRecord = Message | store.MessageRow
"""A stored message: an ORM instance (append, list) or a plain row (the history loader)."""


def message_out(message: MessageRecord) -> MessageOut:
    return MessageOut(
        id=message.id,
        seq=message.seq,
        role=message.role,
        content=message.content if message.content_parts is None else message.content_parts,
        name=message.name,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
        metadata=message.metadata_,
        client_id=message.client_id,
        token_count=message.token_count,
        created_at=message.created_at,
    )


def session_out(session: Session, summary_count: int) -> SessionOut:
    return SessionOut(
        id=session.external_id,
        metadata=session.metadata_,
        settings=session.settings,
        message_count=session.last_seq,
        summary_count=summary_count,
        last_seq=session.last_seq,
        created_at=session.created_at,
        updated_at=session.updated_at,
    )


SummaryRecord = Summary | store.SummaryRow
"""A stored summary: an ORM instance, or a plain row (the history loader)."""


def summary_out(summary: SummaryRecord, session_external_id: str) -> SummaryOut:
    return SummaryOut(
        id=summary.id,
        session_id=session_external_id,
        level=summary.level,
        first_seq=summary.first_seq,
        last_seq=summary.last_seq,
        first_message_id=summary.first_message_id,
        last_message_id=summary.last_message_id,
        message_count=summary.message_count,
        approx_tokens=summary.approx_tokens,
        summary_text=summary.summary_text,
        model=summary.model,
        superseded_by=summary.superseded_by,
        metadata=summary.metadata_,
        created_at=summary.created_at,
    )


# --- sessions -------------------------------------------------------------------------------


async def create_session(db: AsyncSession, tenant: str, body: SessionCreate) -> SessionOut:
    external_id = body.id or f"ses_{uuid.uuid4().hex}"
    session = await store.create_session(
        db,
        tenant,
        external_id,
        body.metadata,
        body.settings.model_dump(exclude_none=True),
    )
    return session_out(session, 0)


async def get_session(db: AsyncSession, tenant: str, external_id: str) -> SessionOut:
    session = await store.get_session(db, tenant, external_id)
    counts = await store.live_summary_counts(db, [session.id])
    return session_out(session, counts.get(session.id, 0))


async def list_sessions(
    db: AsyncSession, tenant: str, limit: int, cursor: str | None
) -> tuple[list[SessionOut], str | None]:
    sessions = await store.list_sessions(db, tenant, limit + 1, decode_cursor(cursor))
    page = sessions[:limit]
    counts = await store.live_summary_counts(db, [session.id for session in page])
    next_cursor = str(page[-1].id) if len(sessions) > limit else None
    return [session_out(s, counts.get(s.id, 0)) for s in page], next_cursor


async def update_session(
    db: AsyncSession, tenant: str, external_id: str, body: SessionUpdate
) -> SessionOut:
    changes = body.model_dump(exclude_unset=True)
    if "settings" in changes:
        changes["settings"] = (
            body.settings.model_dump(exclude_none=True) if body.settings is not None else {}
        )
    if "metadata" in changes and changes["metadata"] is None:
        changes["metadata"] = {}
    session = await store.update_session(db, tenant, external_id, changes)
    counts = await store.live_summary_counts(db, [session.id])
    return session_out(session, counts.get(session.id, 0))


async def delete_session(db: AsyncSession, tenant: str, external_id: str) -> None:
    await store.delete_session(db, tenant, external_id)


# --- messages -------------------------------------------------------------------------------


async def append(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    messages: Sequence[MessageIn],
) -> AppendResponse:
    """Store a batch; when the backlog reaches a limit, record a job (same transaction)."""
    prepare = partial(new_messages, messages, settings.max_message_bytes)
    size = sum(len(str(message.content or "")) for message in messages)
    batch = await asyncio.to_thread(prepare) if size > OFFLOAD_CHARS else prepare()
    outcome, reason = await store_batch(database, settings, tenant, external_id, batch)
    return AppendResponse(
        messages=[message_out(message) for message in outcome.messages],
        summarization=SummarizationStatus(
            scheduled=reason is not None,
            reason=reason if reason in ("message_limit", "token_limit") else None,
        ),
    )


async def store_batch(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    batch: Sequence[store.NewMessage],
) -> tuple[store.AppendOutcome, Reason | None]:
    """Append `batch` in one transaction, exactly once even when the connection dies.

    Lost before COMMIT was sent, the transaction stored nothing: it runs again on a fresh
    connection. Lost while COMMIT was under way, the database is asked whether the
    transaction landed (by its id): if it did, its outcome is the answer; if it did not, it
    runs again; if the database cannot tell in time, `CommitInterrupted` goes up (503).
    """
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        outcome: store.AppendOutcome | None = None
        try:
            async with database.transaction() as db:
                outcome = await store.append_messages(db, tenant, external_id, batch)
                reason = await schedule_if_due(db, outcome.session, settings)
            return outcome, reason
        except CommitInterrupted as exc:
            assert outcome is not None
            landed = await committed(database, outcome.transaction_id)
            if landed:
                return outcome, reason
            if landed is None:
                raise
            if attempt == APPEND_ATTEMPTS:
                raise exc.__cause__ or exc from None  # it did not land: nothing was stored
            cause = f"during COMMIT, which did not land: {describe_fault(exc)}"
        except Exception as exc:
            if attempt == APPEND_ATTEMPTS or not connection_lost(exc):
                raise
            cause = describe_fault(exc)
        metrics.DATABASE_RETRIES.labels("append").inc()
        logger.warning("an append lost its database connection; appending again: %s", cause)
        await asyncio.sleep(RETRY_PAUSE_SECONDS * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def committed(database: Database, transaction_id: int | None) -> bool | None:
    """Whether a transaction whose COMMIT was cut off landed; None if the database cannot tell
    within COMMIT_STATUS_WAIT_SECONDS.

    SQLite (no id) is local: a COMMIT that raised did not happen.
    """
    if transaction_id is None:
        return False
    deadline = time.monotonic() + COMMIT_STATUS_WAIT_SECONDS
    while True:
        try:
            async with database.reading() as db:
                status = await store.transaction_status(db, transaction_id)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            status = "in progress"  # the database is not answering yet: ask again
        if status in ("committed", "aborted") or status is None:
            return None if status is None else status == "committed"
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(COMMIT_STATUS_POLL_SECONDS)


async def list_messages(
    db: AsyncSession, tenant: str, external_id: str, after_seq: int, limit: int
) -> tuple[list[MessageOut], str | None]:
    session = await store.get_session(db, tenant, external_id)
    rows = await store.list_messages(db, session.id, after_seq, limit + 1)
    page = rows[:limit]
    next_cursor = str(page[-1].seq) if len(rows) > limit else None
    return [message_out(message) for message in page], next_cursor


async def history(
    db: AsyncSession,
    compactor: Compactor,
    tenant: str,
    external_id: str,
    summary_limit: int | None,
    max_tokens: int | None,
) -> History:
    """The history loader; over `max_tokens`, compact inline once (if enabled), then truncate."""
    session = await store.get_session(db, tenant, external_id)
    policy = compactor.settings.policy(session.settings)
    loaded = await load_history(db, compactor, session, summary_limit, max_tokens)
    if (
        max_tokens is not None
        and loaded.truncated_messages > 0
        and policy.dynamic_summary_enabled
        and policy.retry_on_context_overflow
    ):
        await db.close()  # the read hands its connection back while the LLM works
        with suppress(CompactionBusy):
            try:
                compaction = partial(
                    compactor.run,
                    session.id,
                    "proactive",
                    "token_limit",
                    wait_seconds=INLINE_WAIT_SECONDS,
                    keep_pending_turn=True,
                )
                async with asyncio.timeout(compactor.settings.summary_inline_deadline_seconds):
                    summary = await retrying(compaction, "an inline compaction", "summarization")
            except Exception as exc:
                if not isinstance(exc, TimeoutError) and not cut_off(exc):
                    raise
                # Past its deadline (the chat turn cannot wait), or cut off twice by a lost
                # database connection: answer the truncated context, summarize in the background.
                if not isinstance(exc, TimeoutError):
                    logger.warning(
                        "an inline compaction lost its database connection twice; answering "
                        "the truncated context: %s",
                        describe_fault(exc),
                    )
                schedule = partial(compactor.schedule, session.id, "token_limit")
                await retrying(schedule, "scheduling a summarization", "summarization")
                return loaded.model_copy(update={"summarization_pending": True})
            if summary is not None:
                # One compaction only: whatever it achieved, truncation does the rest.
                loaded = await load_history(db, compactor, session, summary_limit, max_tokens)
    return loaded


async def load_history(
    db: AsyncSession,
    compactor: Compactor,
    session: Session,
    summary_limit: int | None,
    max_tokens: int | None,
) -> History:
    """Latest live summaries and the messages after them, assembled under `max_tokens`."""
    policy = compactor.settings.policy(session.settings)
    summaries = await store.live_summaries(db, session.id, summary_limit or policy.summary_limit)
    # The pinned prefix is shown unless a loaded summary covers it (pinning was off when the
    # session's first summary was made).
    pinned_seq = session.pinned_seq
    if summaries and summaries[0].first_seq <= pinned_seq:
        pinned_seq = 0
    pinned = await store.messages_between(db, session.id, 1, pinned_seq) if pinned_seq else []
    pinned_tokens = sum(message.token_count for message in pinned)
    after_seq = summaries[-1].last_seq if summaries else pinned_seq
    budget = None if max_tokens is None else max(1, max_tokens - pinned_tokens)
    messages = await store.tail_within_budget(db, session.id, after_seq, budget)
    first_loaded = messages[0].seq if messages else session.last_seq + 1
    context = assemble(
        [summary_message(s.first_seq, s.last_seq, s.summary_text) for s in summaries],
        [Item(openai_message(message), message.token_count) for message in messages],
        max_tokens,
        not_loaded=first_loaded - after_seq - 1,
        pinned=[Item(openai_message(message), message.token_count) for message in pinned],
    )
    return History(
        session_id=session.external_id,
        pinned=[message_out(message) for message in pinned],
        summaries=[summary_out(summary, session.external_id) for summary in summaries],
        messages=[message_out(message) for message in messages],
        context=context.messages,
        token_estimate=context.token_estimate,
        truncated_messages=context.truncated_messages,
        summarization_pending=compactor.locks.is_held(session.id)
        or await store.has_pending_job(db, session.id),
    )


async def compact(
    db: AsyncSession,
    compactor: Compactor,
    tenant: str,
    external_id: str,
    body: CompactRequest,
) -> CompactResponse:
    """Summarize now, inline; waits (bounded) for a running summarization of the session."""
    session = await store.get_session(db, tenant, external_id)
    keep_last_n = 0 if body.trigger == "overflow_retry" else body.keep_last_n
    await db.close()  # the read hands its connection back while the LLM works
    deadline = compactor.settings.summary_compact_deadline_seconds
    try:
        async with asyncio.timeout(deadline):
            summary = await compactor.run(
                session.id,
                body.trigger,
                body.trigger,
                keep_last_n,
                wait_seconds=COMPACT_WAIT_SECONDS,
                keep_pending_turn=body.trigger == "overflow_retry",
            )
    except CompactionBusy as exc:
        raise SummarizationInProgress(
            "a summarization of this session is still running; retry shortly"
        ) from exc
    except TimeoutError as exc:
        raise SummarizationTimeout(
            f"the summarization did not finish within {deadline:g} s "
            "(SUMMARY_COMPACT_DEADLINE_SECONDS); nothing was stored, retry later"
        ) from exc
    session = await store.get_session(db, tenant, external_id)  # 404 if deleted meanwhile
    loaded = await load_history(db, compactor, session, None, None)
    return CompactResponse(
        summary=summary_out(summary, session.external_id) if summary is not None else None,
        history=loaded,
    )


# --- summaries ------------------------------------------------------------------------------


async def list_summaries(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    include_superseded: bool,
    limit: int,
    cursor: str | None,
) -> tuple[list[SummaryOut], str | None]:
    session = await store.get_session(db, tenant, external_id)
    rows = await store.list_summaries(
        db, session.id, include_superseded, limit + 1, decode_cursor(cursor)
    )
    page = rows[:limit]
    next_cursor = str(page[-1].id) if len(rows) > limit else None
    return [summary_out(summary, session.external_id) for summary in page], next_cursor


async def get_summary(db: AsyncSession, tenant: str, summary_id: int) -> SummaryDetail:
    summary, session = await store.get_summary(db, tenant, summary_id)
    message_ids = await store.summary_message_ids(db, summary.id)
    return SummaryDetail(
        **summary_out(summary, session.external_id).model_dump(), message_ids=message_ids
    )


def decode_cursor(cursor: str | None) -> int | None:
    """Cursors are opaque to clients; here they are the last id (or seq) of the previous page."""
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19:
        raise BadRequest("cursor is not one this server handed out")
    return int(cursor)
