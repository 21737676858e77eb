"""A session moved as JSON Lines: export and import (`api.schemas.transfer` says each line's
shape), for the routes and for `scripts/move_tenant` alike.

An export streams from one read snapshot, a page at a time, so the file is one consistent
moment of the session and its memory does not grow with the session. An import reads the file
line by line and checks each line against what came before it as it stores it, in one
transaction: the first line found wrong (not JSON, a wrong shape, a seq out of order, a summary
covering a removed message, a file cut short) raises `ValidationFailed` naming its line, and
the transaction stores nothing. What the import keeps in memory is one batch of messages, the
seqs of hidden messages (removed or orphaned) and a few numbers per summary.
"""

from __future__ import annotations

import asyncio
import tempfile
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from api import items
from api.db.models import utcnow
from api.db.transactions import Database
from api.errors import PayloadTooLarge, SessionExists, ValidationFailed
from api.json_values import check_json_value, check_text
from api.schemas.common import MessageFormat, Role
from api.schemas.messages import MessageIn
from api.schemas.transfer import (
    TRANSFER_VERSION,
    EndLine,
    ImportResult,
    MessageLine,
    SessionLine,
    SummaryLine,
    TransferLine,
)
from api.settings import SummaryOverrides
from api.store import sessions
from api.store import transfer as store
from api.store.rows import MessageRow, SessionRow

NDJSON = "application/x-ndjson"
"""The media type of an exported session (JSON Lines)."""

EXPORT_MESSAGE_PAGE = 1000
"""Messages read per statement of an export (one window of seqs), sent as one chunk."""

EXPORT_SUMMARY_PAGE = 100
"""Summaries read per statement of an export, their covered seqs read with them: fewer than
messages, since a roll-up's runs are read in the same round trip."""

IMPORT_BATCH = 1000
"""Message lines inserted per round trip by an import: larger batches save little time and
hold more lines in memory."""

SPOOL_CHUNK_BYTES = 1 << 16
"""Bytes read back per call from a spooled request body."""

# --- export ---------------------------------------------------------------------------------


@asynccontextmanager
async def snapshot(database: Database) -> AsyncIterator[AsyncSession]:
    """A session reading one consistent moment of the database, however many statements it
    runs: on PostgreSQL a REPEATABLE READ transaction, on SQLite a read transaction (in WAL
    mode writers go on meanwhile). It only reads, and rolls back when the block ends."""
    async with database.sessionmaker() as db:
        if db.get_bind().dialect.name == "postgresql":
            await db.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            await db.execute(text("SET TRANSACTION READ ONLY"))
        else:
            # sqlite3 begins no transaction before a read; the snapshot starts at the first one
            await db.execute(text("BEGIN"))
        yield db


async def export_session(database: Database, tenant: str, external_id: str) -> AsyncIterator[bytes]:
    """The session as JSON Lines, in chunks of whole lines. The session is read before this
    returns (`SessionNotFound` is raised here, not in the stream); the rest streams from the
    same snapshot."""
    lines = _export(database, tenant, external_id)
    first = await anext(lines)
    return _after(first, lines)


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def _export(database: Database, tenant: str, external_id: str) -> AsyncIterator[bytes]:
    async with snapshot(database) as db:
        session = await sessions.get_session(db, tenant, external_id)
        yield _line(session_line(session))
        messages = 0
        after = 0
        while after < session.last_seq:
            through = min(after + EXPORT_MESSAGE_PAGE, session.last_seq)
            rows = await store.message_window(db, session.id, after, through)
            messages += len(rows)
            yield b"".join(_line(message_line(row)) for row in rows)
            after = through
        refs: dict[int, int] = {}
        position: store.SummaryPosition | None = None
        while True:
            page = await store.summary_page(db, session.id, position, EXPORT_SUMMARY_PAGE)
            if not page:
                break
            covers = await store.covered_ranges(db, [summary.row.id for summary in page])
            chunk: list[bytes] = []
            for summary in page:
                refs[summary.row.id] = len(refs) + 1
                chunk.append(_line(summary_line(summary, refs, covers[summary.row.id])))
            yield b"".join(chunk)
            position = page[-1].position
        yield _line(EndLine(type="end", messages=messages, summaries=len(refs)))


def _line(line: SessionLine | MessageLine | SummaryLine | EndLine) -> bytes:
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


# --- reading a file -------------------------------------------------------------------------


async def spooled(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks` (a request body) written to a temporary file first, then read back: the
    import's transaction then lasts as long as the database work, not as long as the client
    takes to send (on SQLite it holds the database's write lock)."""
    with tempfile.TemporaryFile() as spool:
        async for chunk in chunks:
            await asyncio.to_thread(spool.write, chunk)
        await asyncio.to_thread(spool.seek, 0)
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
    if pending.strip():
        yield number + 1, bytes(pending)


def _too_long(number: int, max_line_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"line {number}: over {max_line_bytes} bytes (MAX_REQUEST_BYTES)")


def parsed(number: int, raw: bytes) -> SessionLine | MessageLine | SummaryLine | EndLine:
    """A line as its model; `ValidationFailed` naming the line and the first problem."""
    try:
        return TransferLine.model_validate_json(raw).root
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        if error["type"] == "json_invalid":
            raise ValidationFailed(f"line {number}: not JSON ({error['msg']})") from None
        where = ".".join(str(part) for part in error["loc"][1:])
        problem = f"{where}: {error['msg']}" if where else error["msg"]
        raise ValidationFailed(f"line {number}: {problem}") from None


# --- import ---------------------------------------------------------------------------------


class Refused(Exception):
    """A line is wrong: the reason, without the line number the caller adds."""


@dataclass
class _Stored:
    """What an import keeps of a summary it stored: enough to check what refers to it."""

    id: int
    line: int
    level: int
    first_seq: int
    last_seq: int
    erased: bool
    absorbed: list[tuple[int, int]] = field(default_factory=list)


class Importer:
    """One import in one transaction: `take` each line in order, then `finish`.

    A message line is checked and kept in a batch stored `IMPORT_BATCH` at a time; a summary
    line, which comes after every message, is checked against the hidden messages' seqs and
    the summaries before it, then stored with its links."""

    def __init__(self, db: AsyncSession, tenant: str, external_id: str | None) -> None:
        self.db = db
        self.tenant = tenant
        self.external_id = external_id
        self.session: SessionLine | None = None
        self.session_key = 0
        self.ended = False
        self.messages = 0
        self.removed = array("q")
        """Seqs of tombstones, ascending."""
        self.hidden = array("q")
        """Seqs of messages no view shows (tombstones and orphans), ascending."""
        self.batch: list[dict[str, Any]] = []
        self.batch_client_ids: dict[str, int] = {}
        self.summaries: dict[int, _Stored] = {}
        self.live: list[tuple[int, int, int]] = []
        """`(first_seq, last_seq, line)` of each live summary."""

    async def take(self, number: int, raw: bytes) -> None:
        """Check and store one line; `ValidationFailed` naming it when it is wrong."""
        if not raw.strip():
            return
        line = parsed(number, raw)
        try:
            await self._take(number, line)
        except Refused as exc:
            raise ValidationFailed(f"line {number}: {exc}") from None

    async def _take(
        self, number: int, line: SessionLine | MessageLine | SummaryLine | EndLine
    ) -> None:
        if self.ended:
            raise Refused("a line after the `end` line")
        if isinstance(line, SessionLine):
            if self.session is not None:
                raise Refused("a second `session` line")
            await self._session(line)
            return
        if self.session is None:
            raise Refused(f"a `{line.type}` line before the `session` line (the first line)")
        if isinstance(line, MessageLine):
            if self.summaries:
                raise Refused("a `message` line after a `summary` line (messages come first)")
            await self._message(number, line, self.session)
        elif isinstance(line, SummaryLine):
            await self._all_messages_read(self.session)
            await self._summary(number, line, self.session)
        else:
            await self._all_messages_read(self.session)
            self._end(line, self.session)

    async def finish(self, lines: int) -> ImportResult:
        """After the last line: refuse a file without its `end` line (cut short)."""
        if self.session is None:
            raise ValidationFailed("line 1: the file is empty (no `session` line)")
        if not self.ended:
            raise ValidationFailed(
                f"line {lines + 1}: the file ends without its `end` line (cut short?)"
            )
        return ImportResult(
            id=self.external_id or self.session.id,
            messages=self.messages,
            summaries=len(self.summaries),
        )

    async def _session(self, line: SessionLine) -> None:
        if line.format is None and line.last_seq:
            raise Refused("format: null, but the session holds messages")
        if line.expires_at is not None and line.expires_at <= utcnow():
            raise Refused("expires_at has passed: the session would be gone as it landed")
        for name in ("pinned_seq", "removed_count"):
            if getattr(line, name) > line.last_seq:
                raise Refused(f"{name} {getattr(line, name)} is past last_seq {line.last_seq}")
        try:
            SummaryOverrides.model_validate(line.settings)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"])
            raise Refused(f"settings.{where}: {error['msg']}") from None
        _checked(check_json_value, line.metadata, "metadata")
        external_id = self.external_id or line.id
        values = line.model_dump(exclude={"type", "version", "id"})
        values["external_id"] = external_id
        session_key = await store.insert_session(self.db, self.tenant, values)
        if session_key is None:
            raise SessionExists(external_id)
        self.session = line
        self.session_key = session_key

    async def _message(self, number: int, line: MessageLine, session: SessionLine) -> None:
        expected = self.messages + 1
        if line.seq != expected:
            raise Refused(f"seq {line.seq} where {expected} was expected (seqs run 1, 2, ...)")
        if line.seq > session.last_seq:
            raise Refused(f"seq {line.seq} is past the session's last_seq {session.last_seq}")
        if line.seq <= session.pinned_seq and line.role not in ("system", "developer"):
            raise Refused(
                f"role {line.role!r} in the pinned prefix (seqs up to pinned_seq "
                f"{session.pinned_seq} are system or developer messages)"
            )
        if line.removed_at is not None:
            _check_tombstone(line)
            self.removed.append(line.seq)
        else:
            _check_message(line, session.format)
        if line.removed_at is not None or line.orphaned_at is not None:
            self.hidden.append(line.seq)
        if line.client_id is not None:
            if line.client_id in self.batch_client_ids:
                first = self.batch_client_ids[line.client_id]
                raise Refused(f"client_id {line.client_id!r} is line {first}'s too")
            self.batch_client_ids[line.client_id] = number
        self.messages = line.seq
        content = line.content
        self.batch.append(
            {
                "session_id": self.session_key,
                "seq": line.seq,
                "role": line.role,
                "content": content if isinstance(content, str) else None,
                "content_parts": content if isinstance(content, list) else None,
                "name": line.name,
                "tool_calls": line.tool_calls,
                "tool_call_id": line.tool_call_id,
                "metadata": line.metadata,
                "client_id": line.client_id,
                "token_count": line.token_count,
                "item": None if line.item is None else items.item_text(line.item),
                "created_at": line.created_at,
                "removed_at": line.removed_at,
                "orphaned_at": line.orphaned_at,
            }
        )
        if len(self.batch) >= IMPORT_BATCH:
            await self._store_batch()

    async def _store_batch(self) -> None:
        if not await store.insert_messages(self.db, self.batch):
            taken = await store.client_ids_taken(
                self.db, self.session_key, list(self.batch_client_ids)
            )
            lines = [self.batch_client_ids[client_id] for client_id in taken]
            first = min(lines, default=None)
            raise ValidationFailed(
                f"line {first}: its client_id is an earlier line's too"
                if first is not None
                else "a batch of message lines could not be stored"
            )
        self.batch = []
        self.batch_client_ids = {}

    async def _all_messages_read(self, session: SessionLine) -> None:
        if self.batch:
            await self._store_batch()
        if self.messages != session.last_seq:
            raise Refused(
                f"the session's last_seq is {session.last_seq}, but {self.messages} message "
                "lines came before this one"
            )
        if len(self.removed) != session.removed_count:
            raise Refused(
                f"the session's removed_count is {session.removed_count}, but "
                f"{len(self.removed)} message lines are tombstones"
            )

    async def _summary(self, number: int, line: SummaryLine, session: SessionLine) -> None:
        if line.ref != len(self.summaries) + 1:
            raise Refused(f"ref {line.ref} where {len(self.summaries) + 1} was expected")
        if not line.first_seq <= line.last_seq <= session.last_seq:
            raise Refused(
                f"seqs {line.first_seq}..{line.last_seq} are not a range of the session's "
                f"seqs 1..{session.last_seq}"
            )
        self._check_covers(line)
        erased = line.erased_at is not None
        if erased and (line.summary_text or line.summary_prompt):
            raise Refused("an erased summary keeps no summary_text and no summary_prompt")
        for name in ("summary_text", "summary_prompt", "model"):
            _checked(check_text, getattr(line, name), name)
        _checked(check_json_value, line.metadata, "metadata")
        parent = self._parent(line)
        values = line.model_dump(
            exclude={"type", "ref", "covers", "first_message_seq", "last_message_seq"}
        )
        values["superseded_by"] = None if parent is None else parent.id
        summary_id = await store.insert_summary(
            self.db, self.session_key, values, line.first_message_seq, line.last_message_seq
        )
        await store.link_ranges(self.db, summary_id, self.session_key, line.covers)
        self.summaries[line.ref] = _Stored(
            summary_id, number, line.level, line.first_seq, line.last_seq, erased
        )
        if parent is not None:
            parent.absorbed.append((line.first_seq, line.last_seq))
        elif not erased:
            self.live.append((line.first_seq, line.last_seq, number))

    def _check_covers(self, line: SummaryLine) -> None:
        """The covered seqs lie in the range, as ascending disjoint runs whose ends are the
        summary's end messages; they hold every message of the range a view shows, and no
        tombstone unless the summary is erased."""
        covers = line.covers
        if not covers:
            raise Refused("covers: a summary covers at least one message")
        previous = line.first_seq - 1
        for first, last in covers:
            if first <= previous or last < first or last > line.last_seq:
                raise Refused(
                    f"covers: [{first}, {last}] is not an ascending run of seqs inside "
                    f"{line.first_seq}..{line.last_seq} after the runs before it"
                )
            previous = last
        count = sum(last - first + 1 for first, last in covers)
        if count != line.message_count:
            raise Refused(f"message_count {line.message_count}, but covers holds {count} seqs")
        ends = (covers[0][0], covers[-1][1])
        if (line.first_message_seq, line.last_message_seq) != ends:
            raise Refused(
                f"first_message_seq and last_message_seq are {line.first_message_seq} and "
                f"{line.last_message_seq}, not the ends of covers ({ends[0]} and {ends[1]})"
            )
        if line.erased_at is None:
            for first, last in covers:
                removed = _first_in(self.removed, first, last)
                if removed is not None:
                    raise Refused(
                        f"covers seq {removed}, a removed message, and is not erased (a live or "
                        "superseded summary covers no tombstone)"
                    )
        gaps = [(line.first_seq, covers[0][0] - 1), *_between(covers)]
        gaps.append((covers[-1][1] + 1, line.last_seq))
        for first, last in gaps:
            shown = _first_not_in(self.hidden, first, last)
            if shown is not None:
                raise Refused(f"does not cover seq {shown} of its range, a message views show")

    def _parent(self, line: SummaryLine) -> _Stored | None:
        """The roll-up that absorbed the summary: an earlier line whose range holds it, a
        level above it, and erased only if the summary is too."""
        if line.superseded_by is None:
            return None
        parent = self.summaries.get(line.superseded_by)
        if parent is None:
            raise Refused(
                f"superseded_by {line.superseded_by} names no earlier summary line (a roll-up "
                "comes before the summaries it absorbed)"
            )
        if parent.level <= line.level:
            raise Refused(
                f"superseded_by {line.superseded_by}, of level {parent.level}, not above "
                f"level {line.level}"
            )
        if not parent.first_seq <= line.first_seq <= line.last_seq <= parent.last_seq:
            raise Refused(
                f"superseded_by {line.superseded_by}, whose seqs {parent.first_seq}.."
                f"{parent.last_seq} do not hold {line.first_seq}..{line.last_seq}"
            )
        if parent.erased and line.erased_at is None:
            raise Refused(f"superseded_by {line.superseded_by}, which is erased, but not erased")
        return parent

    def _end(self, line: EndLine, session: SessionLine) -> None:
        counted = (self.messages, len(self.summaries))
        if (line.messages, line.summaries) != counted:
            raise Refused(
                f"counts {line.messages} messages and {line.summaries} summaries, but the "
                f"file holds {counted[0]} and {counted[1]} (lines lost?)"
            )
        self._check_live(session)
        self._check_rollups()
        self.ended = True

    def _check_live(self, session: SessionLine) -> None:
        """Live summaries cover one contiguous run of seqs, from 1 or after the pinned prefix."""
        live = sorted(self.live)
        if live and live[0][0] not in (1, session.pinned_seq + 1):
            first, last, number = live[0]
            raise ValidationFailed(
                f"line {number}: the oldest live summary ({first}..{last}) starts neither at "
                f"1 nor after the pinned prefix"
            )
        for (_, before, _), (first, last, number) in pairwise(live):
            if first != before + 1:
                raise ValidationFailed(
                    f"line {number}: live summary {first}..{last} does not follow the live "
                    f"summary ending at seq {before} (live summaries neither overlap nor leave "
                    "a gap)"
                )

    def _check_rollups(self) -> None:
        """A roll-up absorbed summaries tiling its range; an erased one, the end of it."""
        for summary in self.summaries.values():
            if summary.level == 0:
                continue
            runs = sorted(summary.absorbed)
            contiguous = all(b[0] == a[1] + 1 for a, b in pairwise(runs))
            start = runs[0][0] if runs else None
            if summary.erased and start is not None and summary.first_seq <= start:
                start = summary.first_seq
            if (
                not runs
                or not contiguous
                or (start, runs[-1][1])
                != (
                    summary.first_seq,
                    summary.last_seq,
                )
            ):
                raise ValidationFailed(
                    f"line {summary.line}: roll-up {summary.first_seq}..{summary.last_seq} "
                    "is not tiled by the summaries it absorbed"
                )


def _between(covers: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    return ((a[1] + 1, b[0] - 1) for a, b in pairwise(covers))


def _first_in(seqs: array[int], first: int, last: int) -> int | None:
    """The first of the ascending `seqs` in `first..last`."""
    at = bisect_left(seqs, first)
    return seqs[at] if at < len(seqs) and seqs[at] <= last else None


def _first_not_in(seqs: array[int], first: int, last: int) -> int | None:
    """The first seq of `first..last` that the ascending `seqs` lack."""
    if last < first:
        return None
    at = bisect_left(seqs, first)
    if bisect_right(seqs, last) - at == last - first + 1:
        return None
    seq = first
    while at < len(seqs) and seqs[at] == seq:
        at += 1
        seq += 1
    return seq


def _checked(check: Any, value: Any, where: str) -> None:
    try:
        check(value, where)
    except ValueError as exc:
        raise Refused(str(exc)) from None


def _check_tombstone(line: MessageLine) -> None:
    kept = [
        name
        for name in (
            "content",
            "name",
            "tool_calls",
            "tool_call_id",
            "metadata",
            "client_id",
            "item",
        )
        if getattr(line, name) is not None
    ]
    if line.token_count:
        kept.append("token_count")
    if kept:
        raise Refused(f"a removed message (a tombstone) keeps no {', '.join(kept)}")


_CHAT_MESSAGE: TypeAdapter[Any] = TypeAdapter(MessageIn)
"""The append's check of a chat message (its role's schema)."""


def _check_message(line: MessageLine, message_format: str | None) -> None:
    """A message the append would have stored: a chat message in an `openai` session, an item
    whose chat reading the line holds in a `responses` one."""
    _checked(check_json_value, line.metadata, "metadata")
    if line.client_id is not None:
        _checked(check_text, line.client_id, "client_id")
    if message_format == "responses":
        if line.item is None:
            raise Refused("item: null in a `responses` session")
        _checked(items.check_item, line.item, "item")
        reading = items.projection(line.item)
        held = {
            "role": line.role,
            "content": line.content,
            "tool_calls": line.tool_calls,
            "tool_call_id": line.tool_call_id,
        }
        if {key: reading.get(key) for key in held} != held or line.name is not None:
            raise Refused("role, content, tool_calls and tool_call_id are not the item's reading")
        return
    if line.item is not None:
        raise Refused("item: an item in an `openai` session")
    message = {
        "role": line.role,
        "content": line.content,
        "name": line.name,
        "tool_calls": line.tool_calls,
        "tool_call_id": line.tool_call_id,
    }
    try:
        _CHAT_MESSAGE.validate_python({k: v for k, v in message.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"][1:])
        raise Refused(f"{where}: {error['msg']}" if where else error["msg"]) from None


async def import_session(
    database: Database,
    tenant: str,
    chunks: AsyncIterator[bytes],
    max_line_bytes: int,
    external_id: str | None = None,
) -> ImportResult:
    """Store the session a JSON Lines file holds (under `external_id` when given), all of it
    or, at the first wrong line, none of it: one transaction, its lines stored in batches as
    they are read."""
    async with database.transaction() as db:
        importer = Importer(db, tenant, external_id)
        last = 0
        async for number, raw in numbered_lines(chunks, max_line_bytes):
            await importer.take(number, raw)
            last = number
        return await importer.finish(last)
