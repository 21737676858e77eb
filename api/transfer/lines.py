"""The lines of a transfer file: built from rows (an export's), and read back from bytes as
numbered, parsed lines (an import's)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, cast

from pydantic import ValidationError

from api import items
from api.errors import PayloadTooLarge, ValidationFailed
from api.schemas.common import MessageFormat, Role
from api.schemas.transfer import (
    TRANSFER_VERSION,
    EndLine,
    MessageLine,
    SessionLine,
    SummaryLine,
    TransferLine,
)
from api.store import transfer as store
from api.store.rows import MessageRow, SessionRow

NDJSON = "application/x-ndjson"
"""The media type of an exported session (JSON Lines)."""


SPOOL_CHUNK_BYTES = 1 << 16
"""Bytes read back per call from a spooled request body."""


def encoded(line: SessionLine | MessageLine | SummaryLine | EndLine) -> bytes:
    """A line as the file holds it: its JSON and a newline."""
    return line.model_dump_json().encode() + b"\n"


def session_line(session: SessionRow) -> SessionLine:
    return SessionLine.model_construct(
        type="session",
        version=TRANSFER_VERSION,
        id=session.external_id,
        metadata=session.metadata,
        settings=session.settings,
        format=cast(MessageFormat | None, session.format),
        last_seq=session.last_seq,
        pinned_seq=session.pinned_seq,
        removed_count=session.removed_count,
        created_at=session.created_at,
        updated_at=session.updated_at,
        forked_from=session.forked_from,
        fork_seq=session.fork_seq,
        expires_at=session.expires_at,
    )


def message_line(row: MessageRow) -> MessageLine:
    return MessageLine.model_construct(
        type="message",
        seq=row.seq,
        role=cast(Role, row.role),
        content=row.body,
        name=row.name,
        tool_calls=row.tool_calls,
        tool_call_id=row.tool_call_id,
        metadata=row.metadata,
        client_id=row.client_id,
        token_count=row.token_count,
        item=None if row.item is None else items.parse_item(row.item),
        created_at=row.created_at,
        removed_at=row.removed_at,
        orphaned_at=row.orphaned_at,
    )


def summary_line(
    summary: store.ExportedSummary, refs: dict[int, int], covers: list[tuple[int, int]]
) -> SummaryLine:
    row = summary.row
    return SummaryLine.model_construct(
        type="summary",
        ref=refs[row.id],
        first_seq=row.first_seq,
        last_seq=row.last_seq,
        covers=covers,
        first_message_seq=summary.first_message_seq,
        last_message_seq=summary.last_message_seq,
        level=row.level,
        # the roll-up comes first in the export's order; one of another session has no ref
        superseded_by=None if row.superseded_by is None else refs.get(row.superseded_by, 0),
        summary_text=row.summary_text,
        summary_prompt=row.summary_prompt,
        model=row.model,
        temperature=row.temperature,
        target_summary_tokens=row.target_summary_tokens,
        keep_last_n=row.keep_last_n,
        message_count=row.message_count,
        approx_tokens=row.approx_tokens,
        first_message_at=row.first_message_at,
        last_message_at=row.last_message_at,
        metadata=row.metadata,
        created_at=row.created_at,
        erased_at=row.erased_at,
    )


def body_too_large(max_bytes: int) -> PayloadTooLarge:
    """An import body over MAX_IMPORT_BYTES, declared (Content-Length) or counted."""
    return PayloadTooLarge(f"the body is over {max_bytes} bytes (MAX_IMPORT_BYTES)")


@asynccontextmanager
async def spooled(
    chunks: AsyncIterator[bytes], max_bytes: int, max_lines: int
) -> AsyncIterator[AsyncIterator[bytes]]:
    """`chunks` (a request body) written to a temporary file, then read back from it.

    Bytes and lines are counted as they come: past `max_bytes` or `max_lines` the body is
    refused (413) at once, the rest of it unread. The import's transaction (on SQLite, the
    database's write lock) begins once the whole body is here, so it lasts as long as the
    database work, not as long as the client takes to send."""
    with tempfile.TemporaryFile() as spool:
        size = newlines = 0
        open_line = False
        async for chunk in chunks:
            if not chunk:
                continue
            size += len(chunk)
            if size > max_bytes:
                raise body_too_large(max_bytes)
            newlines += chunk.count(b"\n")
            open_line = not chunk.endswith(b"\n")
            if newlines + open_line > max_lines:
                raise PayloadTooLarge(f"the body holds over {max_lines} lines (MAX_IMPORT_LINES)")
            await asyncio.to_thread(spool.write, chunk)
        await asyncio.to_thread(spool.seek, 0)
        yield _read_back(spool)


async def _read_back(spool: IO[bytes]) -> AsyncIterator[bytes]:
    while block := await asyncio.to_thread(spool.read, SPOOL_CHUNK_BYTES):
        yield block


async def numbered_lines(
    chunks: AsyncIterator[bytes], max_line_bytes: int
) -> AsyncIterator[tuple[int, bytes]]:
    """The lines of a byte stream with their numbers (from 1), a line over `max_line_bytes`
    refused (413) before it is held whole."""
    pending = bytearray()
    number = 0
    async for chunk in chunks:
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            number += 1
            if end - start > max_line_bytes:
                raise _too_long(number, max_line_bytes)
            yield number, bytes(pending[start:end])
            start = end + 1
        del pending[:start]
        if len(pending) > max_line_bytes:
            raise _too_long(number + 1, max_line_bytes)
    if pending:
        yield number + 1, bytes(pending)


def _too_long(number: int, max_line_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"line {number}: over {max_line_bytes} bytes (MAX_REQUEST_BYTES)")


def parsed(number: int, raw: bytes) -> SessionLine | MessageLine | SummaryLine | EndLine:
    """A line as its model; `ValidationFailed` naming the line and the first problem (a
    blank line is one: refused at once, not skipped, so a body of them costs nothing)."""
    if not raw.strip():
        raise ValidationFailed(f"line {number}: a blank line (each line is one JSON object)")
    try:
        return TransferLine.model_validate_json(raw).root
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        if error["type"] == "json_invalid":
            raise ValidationFailed(f"line {number}: not JSON ({error['msg']})") from None
        where = ".".join(str(part) for part in error["loc"][1:])
        problem = f"{where}: {error['msg']}" if where else error["msg"]
        raise ValidationFailed(f"line {number}: {problem}") from None
