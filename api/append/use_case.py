"""The append use case: a batch stored exactly once, even when the database connection dies."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from api import items, store
from api.append import postgresql, sqlite
from api.append.batch import Appended, AppendOutcome
from api.context_edits import ContextEdits
from api.db.faults import connection_lost, describe_fault
from api.db.models import utcnow
from api.db.transactions import (
    RETRY_PAUSE_SECONDS,
    CommitConnectionLost,
    Database,
    RetryBudget,
    connection_lost_or_commit_unknown,
    current_budget,
    retrying,
)
from api.errors import ConcurrentChange, PayloadTooLarge
from api.schemas import (
    AppendResponse,
    ChatMessageIn,
    ItemIn,
    MessageOut,
    SummarizationStatus,
)
from api.session_settings import SummaryPolicy
from api.settings import Settings
from api.store.retention import Expiry
from api.summary_jobs import due_reason, schedule_summary
from api.summary_plans import BacklogCounting, pinned_floor, proactive_reason
from summarizer.text import OFFLOAD_CHARS
from summarizer.tokens import count_message
from summarizer.triggers import ProactiveReason

RACE_ATTEMPTS = 3
"""Runs of an append's statement at most when a concurrent request raced it (created the
session, or stored one of its client ids, at the same moment): nothing landed, run it again.
A lost connection is retried within the request's retry budget instead."""

OUTCOME_WAIT_SECONDS = 5.0
"""How long an append that lost its connection waits for the server process that ran its
statement to end, while the database answers (the server ends a dead connection's statement
within moments); while the database does not answer, it waits within the retry budget."""

OUTCOME_POLL_SECONDS = 0.05
"""How often that question is asked again while the statement still runs."""

logger = logging.getLogger("precis.service")


def new_message(message: ChatMessageIn, max_bytes: int, index: int) -> store.NewMessage:
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


def new_item(given: ItemIn, max_bytes: int, index: int) -> store.NewMessage:
    """A Responses item ready to store: its verbatim text, and its chat reading (what the
    summarizer, the cut rules and the token count read)."""
    text = items.item_text(given.item)
    size = len(text.encode())
    if size > max_bytes:
        raise PayloadTooLarge(f"items[{index}].item is {size} bytes; the limit is {max_bytes}")
    reading = items.projection(given.item)
    content = reading.get("content")
    return store.NewMessage(
        role=reading["role"],
        content=content if isinstance(content, str) else None,
        content_parts=content if isinstance(content, list) else None,
        name=None,
        tool_calls=reading.get("tool_calls"),
        tool_call_id=reading.get("tool_call_id"),
        metadata=given.metadata,
        client_id=given.client_id,
        token_count=count_message(reading),
        item=text,
    )


def new_messages(
    messages: Sequence[ChatMessageIn | ItemIn], max_bytes: int
) -> list[store.NewMessage]:
    return [
        new_item(message, max_bytes, index)
        if isinstance(message, ItemIn)
        else new_message(message, max_bytes, index)
        for index, message in enumerate(messages)
    ]


def _text_size(message: ChatMessageIn | ItemIn) -> int:
    """About how much text a message holds: a large batch is prepared off the event loop."""
    if isinstance(message, ItemIn):
        return len(str(message.item))
    return len(str(message.content or ""))


async def prepared(
    messages: Sequence[ChatMessageIn | ItemIn], max_bytes: int
) -> list[store.NewMessage]:
    """`new_messages`, off the event loop when the batch holds much text."""
    prepare = partial(new_messages, messages, max_bytes)
    size = sum(_text_size(message) for message in messages)
    return await asyncio.to_thread(prepare) if size > OFFLOAD_CHARS else prepare()


async def append(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    messages: Sequence[ChatMessageIn | ItemIn],
) -> AppendResponse:
    """Store a batch; when the backlog reaches a limit, record a job (same transaction)."""
    batch = await prepared(messages, settings.max_message_bytes)
    outcome, reason = await store_batch(database, settings, tenant, external_id, batch)
    return AppendResponse(
        messages=[MessageOut.from_row(message) for message in outcome.messages],
        summarization=SummarizationStatus(
            scheduled=reason is not None,
            reason=reason,
        ),
    )


async def store_batch(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    batch: Sequence[store.NewMessage],
) -> tuple[AppendOutcome, ProactiveReason | None]:
    """Append `batch` exactly once, even when the connection dies; record a summarization job
    when the backlog reaches a limit. An expired session is `SessionNotFound`, and nothing is
    stored (its id stays taken until the retention sweep deletes it)."""
    if database.engine.dialect.name == "postgresql":
        return await _store_in_one_statement(database, settings, tenant, external_id, batch)
    return await _store_in_one_call(database, settings, tenant, external_id, batch)


async def _store_in_one_call(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    batch: Sequence[store.NewMessage],
) -> tuple[AppendOutcome, ProactiveReason | None]:
    """The append as one transaction in one call to SQLite's driver (`api.append.sqlite`),
    in the unit of work's driver transaction; it counts the backlog as the session's own
    policy reads it (resolved in the driver's thread, from the row the transaction holds)."""
    counting_of = partial(_counting_of, settings)
    cutoff = _idle_cutoff(settings)
    appended = await sqlite.append(database, tenant, external_id, batch, counting_of, cutoff)
    outcome = appended.outcome
    return outcome, await _schedule_summary_after_append(
        database, settings, outcome.session, appended
    )


def _idle_cutoff(settings: Settings) -> datetime:
    """A session updated at or before this moment has expired (SESSION_IDLE_TTL_DAYS)."""
    return Expiry.at(utcnow(), settings.session_idle_ttl_days).idle_cutoff


def _counting_of(settings: Settings, overrides: dict[str, Any] | None) -> BacklogCounting:
    """The counting of the policy in force for a session with these overrides."""
    return BacklogCounting.of(settings.policy(overrides))


async def _store_in_one_statement(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    batch: Sequence[store.NewMessage],
) -> tuple[AppendOutcome, ProactiveReason | None]:
    """The append as one autocommit statement (PostgreSQL, `api.append.postgresql`).

    Lost before the answer arrived, the statement may have landed: once the server process
    that ran it has ended, the messages carrying this request's append id say whether it did.
    If it did, they are the answer; if not, it runs again (with the same id); if the database
    cannot tell in time, `CommitConnectionLost` goes up (503).
    """
    engine = database.engine
    append_id = secrets.randbits(63)
    budget = current_budget()
    races = 0
    while True:
        try:
            appended = await postgresql.append(
                engine,
                tenant,
                external_id,
                batch,
                append_id,
                _counting_of(settings, None),
                _idle_cutoff(settings),
            )
        except postgresql.AppendConnectionLost as exc:
            outcome = await _landed(
                engine, tenant, external_id, batch, append_id, exc.server_pid, budget
            )
            if outcome is not None:
                return outcome, await _schedule_summary_after_append(
                    database, settings, outcome.session
                )
            # it did not land: nothing was stored
            if not await budget.wait_to_retry(exc, "an append", "append"):
                raise exc.__cause__ or exc from None
        except Exception as exc:
            if postgresql.raced_on_client_id(exc):
                races += 1
                if races < RACE_ATTEMPTS:
                    continue  # nothing landed; the next run sees the other request's message
                raise ConcurrentChange(
                    "concurrent appends stored this batch's client ids; retry"
                ) from exc
            if not connection_lost(exc) or not await budget.wait_to_retry(
                exc, "an append", "append"
            ):
                raise
        else:
            if appended is not None:
                session = appended.outcome.session
                return appended.outcome, await _schedule_summary_after_append(
                    database, settings, session, appended
                )
            races += 1  # a concurrent request created the session just now
            if races >= RACE_ATTEMPTS:
                raise ConcurrentChange(
                    "the session was created and deleted under this append repeatedly; retry"
                )
            await asyncio.sleep(RETRY_PAUSE_SECONDS * races)


def _backlog(
    policy: SummaryPolicy, session: store.SessionRow, appended: Appended
) -> store.Backlog | None:
    """The backlog the append's statement counted, when it is what `proactive_reason` reads
    under the session's `policy`; None when the statement, counting for another policy (the
    server's, on PostgreSQL, where the session overrides it), did not count what this one
    reads: another start of the backlog, or tokens it left out (then they are read again)."""
    counted = appended.backlog
    if max(appended.summarized_seq, pinned_floor(session, policy)) != counted.after_seq:
        return None
    if (
        counted.token_count is None
        and counted.message_count < BacklogCounting.of(policy).tokens_below
    ):
        return None
    return counted


async def _landed(
    engine: AsyncEngine,
    tenant: str,
    external_id: str,
    batch: Sequence[store.NewMessage],
    append_id: int,
    server_pid: int,
    budget: RetryBudget,
) -> AppendOutcome | None:
    """What an append that lost its connection stored, once the server process that ran it has
    ended; None if it stored nothing. Raises `CommitConnectionLost` if the database cannot tell:
    its process still runs after OUTCOME_WAIT_SECONDS, or the database does not answer within
    the budget."""
    running_until: float | None = None
    while True:
        try:
            if not await postgresql.still_running(engine, server_pid):
                return await postgresql.landed(engine, tenant, external_id, batch, append_id)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            # the database is not answering (a restart took the append's connection): wait for it
            asking = "finding out whether an append landed"
            if not await budget.wait_to_retry(exc, asking, "append"):
                raise CommitConnectionLost(
                    "the append's connection was lost and the database did not come back; "
                    "its outcome is unknown"
                ) from exc
            continue
        now = time.monotonic()
        running_until = running_until or now + OUTCOME_WAIT_SECONDS
        if now >= running_until:
            raise CommitConnectionLost("the append's connection was lost; its outcome is unknown")
        await asyncio.sleep(OUTCOME_POLL_SECONDS)


async def _schedule_summary_after_append(
    database: Database,
    settings: Settings,
    session: store.SessionRow,
    appended: Appended | None = None,
) -> ProactiveReason | None:
    """`schedule_summary_if_due` after an append that stored its messages on its own: what the
    append's statement counted (`appended`; None: nothing, as when its connection was lost)
    answers the proactive trigger when it is what the session's policy reads; otherwise the
    backlog is read here, in a read of its own (a write only when due).

    The messages are stored whatever happens here: if the job cannot be recorded, the
    session's next append looks again (its backlog is still over the limit).
    """
    policy = settings.policy(session.settings)
    if not policy.dynamic_summary_enabled:
        return None
    job_queued = appended is not None and appended.job_queued
    backlog = _backlog(policy, session, appended) if appended is not None else None
    counted: ProactiveReason | None = None
    if backlog is not None:
        counted = proactive_reason(policy, backlog)
        if counted == "token_limit" and ContextEdits.of(policy).active:
            counted = None  # the tail's tokens as loaded, parts cleared: `due_reason` reads them
        elif counted is None or job_queued:
            return counted

    async def record() -> ProactiveReason | None:
        reason = counted
        if reason is None:
            async with database.reading() as db:
                reason = await due_reason(db, session, policy)
        if reason is not None and not job_queued:
            async with database.transaction() as db:
                await schedule_summary(db, session.id, reason)
        return reason

    try:
        return await retrying(record, "recording a summarization job", "summarization")
    except Exception as exc:
        if not connection_lost_or_commit_unknown(exc):
            raise
        logger.warning("an append's summarization job was not recorded: %s", describe_fault(exc))
        return None
