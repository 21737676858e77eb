"""The append use case: a batch stored exactly once, even when the database connection dies."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from functools import partial

from api import metrics, store
from api.compaction import schedule_if_due
from api.db.faults import connection_lost, describe_fault
from api.db.transactions import RETRY_PAUSE_SECONDS, CommitInterrupted, Database
from api.errors import PayloadTooLarge
from api.schemas import AppendResponse, MessageIn, MessageOut, SummarizationStatus
from api.settings import Settings
from summarizer.text import OFFLOAD_CHARS
from summarizer.tokens import count_message
from summarizer.triggers import ProactiveReason

APPEND_ATTEMPTS = 3
"""Runs of an append's transaction at most, each on a fresh connection after the previous one
lost its connection without storing anything (a failover may cut two in a row)."""

COMMIT_STATUS_WAIT_SECONDS = 5.0
"""How long an append whose COMMIT was cut off waits for the database to say whether it
landed (the server ends the dead connection's transaction within moments)."""

COMMIT_STATUS_POLL_SECONDS = 0.05
"""How often that question is asked again while the answer is "in progress"."""

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
) -> tuple[store.AppendOutcome, ProactiveReason | None]:
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
                policy = settings.policy(outcome.session.settings)
                reason = await schedule_if_due(db, outcome.session, policy)
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
