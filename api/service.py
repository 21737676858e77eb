"""Use cases of the service: what each route does, between the HTTP layer and the store (the
compact endpoint's: `api.compact`)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api import history_load, store
from api.context_edits import EditOverrides
from api.db.transactions import Database
from api.errors import BadRequest, MessageNotFound
from api.limits import check_metadata_size
from api.schemas import (
    History,
    MessageFormat,
    MessageOut,
    RemovalPreviewOut,
    SessionCreate,
    SessionOut,
    SessionUpdate,
    SummaryDetail,
    SummaryOut,
)
from api.settings import Settings
from api.summarization import Summarization
from api.summary_forest import kind_of
from api.summary_jobs import schedule_summary
from api.summary_plans import pinned_floor

logger = logging.getLogger("precis.service")


# --- sessions -------------------------------------------------------------------------------


async def create_session(
    database: Database, settings: Settings, tenant: str, body: SessionCreate
) -> SessionOut:
    """Create a session in a transaction of its own."""
    # not repeatable: a create that landed would answer 409 the second time
    return await database.write(lambda db: _create_session(db, settings, tenant, body))


async def _create_session(
    db: AsyncSession, settings: Settings, tenant: str, body: SessionCreate
) -> SessionOut:
    external_id = body.id or f"ses_{uuid.uuid4().hex}"
    overrides = body.settings.model_dump(exclude_none=True)
    session = await store.create_session(
        db, tenant, external_id, body.metadata, overrides, body.format, body.expires_at
    )
    return SessionOut.from_row(session, 0, settings.effective(session.settings))


async def get_session(
    db: AsyncSession, settings: Settings, tenant: str, external_id: str
) -> SessionOut:
    session = await store.get_session(db, tenant, external_id)
    counts = await store.live_summary_counts(db, [session.id])
    return SessionOut.from_row(
        session, counts.get(session.id, 0), settings.effective(session.settings)
    )


async def list_sessions(
    db: AsyncSession, settings: Settings, tenant: str, limit: int, cursor: str | None
) -> tuple[list[SessionOut], str | None]:
    sessions = await store.list_sessions(db, tenant, limit + 1, session_position(cursor))
    page = sessions[:limit]
    counts = await store.live_summary_counts(db, [session.id for session in page])
    next_cursor = session_cursor(page[-1]) if len(sessions) > limit else None
    answer = [
        SessionOut.from_row(s, counts.get(s.id, 0), settings.effective(s.settings)) for s in page
    ]
    return answer, next_cursor


async def update_session(
    database: Database, settings: Settings, tenant: str, external_id: str, body: SessionUpdate
) -> SessionOut:
    """Apply the merge patch `body` to the session in a transaction of its own."""
    # a merge patch applied twice gives what it gave once
    return await database.write(
        lambda db: _update_session(db, settings, tenant, external_id, body), repeatable=True
    )


async def _update_session(
    db: AsyncSession, settings: Settings, tenant: str, external_id: str, body: SessionUpdate
) -> SessionOut:
    """Apply the merge patch `body` to the session, read and written in one transaction with
    the session row locked, so concurrent patches of different keys both land."""
    patch = body.model_dump(exclude_unset=True)
    session = await store.get_session(db, tenant, external_id, for_update=True)
    changes: dict[str, Any] = {}
    for key, current in (("metadata", session.metadata), ("settings", session.settings)):
        if key in patch:
            changes[key] = {} if patch[key] is None else merge_patch(current, patch[key])
    if "metadata" in changes:
        check_metadata_size(changes["metadata"], "metadata", settings.max_metadata_bytes)
    if "expires_at" in patch:
        changes["expires_at"] = patch["expires_at"]
    session = await store.update_session(db, tenant, external_id, changes)
    counts = await store.live_summary_counts(db, [session.id])
    return SessionOut.from_row(
        session, counts.get(session.id, 0), settings.effective(session.settings)
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: `patch`'s keys replace `target`'s, objects merge
    recursively, null removes a key; a patch that is not an object replaces the target."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


async def delete_session(database: Database, tenant: str, external_id: str) -> None:
    """Delete the session with its messages, summaries and links, in a transaction."""
    # not repeatable: a delete that landed would answer 404 the second time
    await database.write(lambda db: store.delete_session(db, tenant, external_id))


# --- messages -------------------------------------------------------------------------------


async def remove_message(
    database: Database,
    settings: Settings,
    tenant: str,
    external_id: str,
    message_id: int | None,
) -> store.Removal | None:
    """Remove a message (the newest remaining one when `message_id` is None), hiding the rest
    of its tool exchange, and queue the re-making of the summaries it reached, in one
    transaction.

    None when the message was removed before (removing is idempotent); `MessageNotFound`
    when the session never held it, or holds nothing left to pop.
    """
    # Removing a given message twice answers as once (204); a second pop would remove the
    # next message.
    return await database.write(
        lambda db: _remove_message(db, settings, tenant, external_id, message_id),
        repeatable=message_id is not None,
    )


async def _remove_message(
    db: AsyncSession,
    settings: Settings,
    tenant: str,
    external_id: str,
    message_id: int | None,
) -> store.Removal | None:
    session = await store.get_session(db, tenant, external_id)
    removal = await store.remove(db, session.id, message_id)
    if removal is None:
        if message_id is None:
            raise MessageNotFound(f"session {external_id!r} has no message left to remove")
        if await store.message_exists(db, session.id, message_id):
            return None
        raise MessageNotFound(f"message {message_id} not found in session {external_id!r}")
    if removal.erased_summaries and settings.policy(session.settings).dynamic_summary_enabled:
        await schedule_summary(db, session.id, "erasure")
    return removal


async def preview_removal(
    db: AsyncSession, settings: Settings, tenant: str, external_id: str, message_id: int
) -> RemovalPreviewOut:
    """What `remove_message` would erase and leave to be made again, nothing changed."""
    session = await store.get_session(db, tenant, external_id)
    policy = settings.policy(session.settings)
    preview = await store.removal_preview(db, session.id, message_id, pinned_floor(session, policy))
    if preview is None:
        raise MessageNotFound(
            f"message {message_id} is not in session {external_id!r} (never stored there, or "
            "removed already: nothing is left to remove)"
        )
    leaves = -(-preview.messages // policy.message_limit)
    merges = sum(1 for summary in preview.erased if kind_of(summary) != "leaf")
    return RemovalPreviewOut(
        message_id=message_id,
        seq=preview.seq,
        erased_summaries=[summary.id for summary in preview.erased],
        remake_after_seq=preview.after_seq,
        remake_messages=preview.messages,
        remake_tokens=preview.tokens,
        remake_model_calls=leaves + merges if preview.erased else 0,
    )


async def list_messages(
    db: AsyncSession, tenant: str, external_id: str, after_seq: int, limit: int
) -> tuple[list[MessageOut], str | None]:
    session = await store.get_session(db, tenant, external_id)
    rows = await store.messages_in_range(
        db, session.id, after_seq, session.last_seq, limit=limit + 1
    )
    page = rows[:limit]
    next_cursor = str(page[-1].seq) if len(rows) > limit else None
    return [MessageOut.from_row(message) for message in page], next_cursor


async def read_history(
    database: Database,
    summarization: Summarization,
    tenant: str,
    external_id: str,
    summary_limit: int | None,
    max_tokens: int | None,
    message_format: MessageFormat | None = None,
    edits: EditOverrides | None = None,
) -> History:
    """The history route's answer (`history_load.fitted_context`), on a read session of its own."""
    # Opened here, not by the ReadDb dependency: a dependency with a cleanup step costs
    # FastAPI an exit stack and a shielded scope per request.
    async with database.reading() as db:
        loaded = await history_load.fitted_context(
            db,
            summarization,
            tenant,
            external_id,
            summary_limit,
            max_tokens,
            message_format,
            edits=edits,
        )
    return loaded.history()


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
    return [SummaryOut.from_row(summary, session.external_id) for summary in page], next_cursor


async def get_summary(db: AsyncSession, tenant: str, summary_id: int) -> SummaryDetail:
    summary, session_external_id = await store.get_summary(db, tenant, summary_id)
    message_ids = await store.summary_message_ids(db, summary)
    return SummaryDetail.from_row(summary, session_external_id, message_ids=message_ids)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def session_cursor(session: store.SessionRow) -> str:
    """The session list's cursor after `session`: its creation time and key."""
    micros = (session.created_at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{session.id}"


def session_position(cursor: str | None) -> store.SessionPosition | None:
    """Where the page a `_session_cursor` names starts (checked by the route)."""
    if cursor is None:
        return None
    micros, _, key = cursor.partition("-")
    return store.SessionPosition(EPOCH + timedelta(microseconds=int(micros)), int(key))


def decode_cursor(cursor: str | None) -> int | None:
    """Cursors are opaque to clients; here they are the last id (or seq) of the previous page."""
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19:
        raise BadRequest("cursor is not one this server handed out")
    return int(cursor)
