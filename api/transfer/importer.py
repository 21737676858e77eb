"""An import: the lines of a file taken in order, checked and stored in one transaction."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api import items
from api.append.use_case import prepared
from api.db.transactions import Database
from api.errors import PayloadTooLarge, SessionExists, ValidationFailed
from api.limits import check_metadata_size
from api.schemas.messages import ChatMessageIn, ItemIn
from api.schemas.transfer import EndLine, ImportResult, MessageLine, SessionLine, SummaryLine
from api.settings import Settings
from api.store import transfer as store
from api.transfer.checks import (
    Refused,
    check_message,
    check_session,
    check_summary,
    check_tombstone,
)
from api.transfer.lines import numbered_lines, parsed

IMPORT_BATCH = 1000
"""Message lines inserted per round trip by an import: larger batches save little time and
hold more lines in memory."""


@dataclass(frozen=True)
class AppendLimits:
    """The append's limits, which an import through the API holds each message to (413 as
    for an append), its token count made again as the append makes it."""

    max_message_bytes: int
    max_metadata_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> AppendLimits:
        return cls(settings.max_message_bytes, settings.max_metadata_bytes)


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

    def __init__(
        self,
        db: AsyncSession,
        tenant: str,
        external_id: str | None,
        allowed_models: frozenset[str] | None,
        limits: AppendLimits | None,
    ) -> None:
        self.db = db
        self.tenant = tenant
        self.external_id = external_id
        self.allowed_models = allowed_models
        self.limits = limits
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
            article = "an" if line.type[:1] in "aeiou" else "a"
            raise Refused(
                f"{article} `{line.type}` line before the `session` line (the first line)"
            )
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
        check_session(line, self.allowed_models)
        if self.limits is not None:
            _check_metadata(1, line.metadata, self.limits.max_metadata_bytes)
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
        token_count = 0
        if line.removed_at is not None:
            check_tombstone(line)
            self.removed.append(line.seq)
        else:
            message = check_message(line, session.format)
            token_count = await self._token_count(number, line, message)
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
                "token_count": token_count,
                "item": None if line.item is None else items.item_text(line.item),
                "created_at": line.created_at,
                "removed_at": line.removed_at,
                "orphaned_at": line.orphaned_at,
            }
        )
        if len(self.batch) >= IMPORT_BATCH:
            await self._store_batch()

    async def _token_count(
        self, number: int, line: MessageLine, message: ChatMessageIn | ItemIn
    ) -> int:
        """The message's tokens, counted as the append counts them once it passed the
        append's size checks; the file's count only on the operator's own move (no limits)."""
        if self.limits is None:
            return line.token_count
        _check_metadata(number, line.metadata, self.limits.max_metadata_bytes)
        try:
            (new,) = await prepared([message], self.limits.max_message_bytes)
        except PayloadTooLarge as exc:
            raise PayloadTooLarge(
                f"line {number}: over MAX_MESSAGE_BYTES, as an append would be ({exc.detail})"
            ) from None
        return new.token_count

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
        check_summary(line, session.last_seq, self.removed, self.hidden)
        erased = line.erased_at is not None
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
        """Live summaries cover one contiguous run of seqs, from 1 or after the pinned prefix,
        but for holes a removal opened (each holds a tombstone)."""
        live = sorted(self.live)
        if (
            live
            and live[0][0] not in (1, session.pinned_seq + 1)
            and not self._erased_over(session.pinned_seq + 1, live[0][0] - 1)
        ):
            first, last, number = live[0]
            raise ValidationFailed(
                f"line {number}: the oldest live summary ({first}..{last}) starts neither at "
                f"1 nor after the pinned prefix"
            )
        for (_, before, _), (first, last, number) in pairwise(live):
            if first <= before or (
                first > before + 1 and not self._erased_over(before + 1, first - 1)
            ):
                raise ValidationFailed(
                    f"line {number}: live summary {first}..{last} does not follow the live "
                    f"summary ending at seq {before} (live summaries neither overlap nor leave "
                    "a gap)"
                )

    def _erased_over(self, first: int, last: int) -> bool:
        """Whether seqs `first..last` hold a tombstone: a hole between live summaries is one a
        removal opened (its leaf erased, made again later) only then."""
        at = bisect_left(self.removed, first)
        return at < len(self.removed) and self.removed[at] <= last

    def _check_rollups(self) -> None:
        """A roll-up absorbed summaries tiling its range; an erased one, a run of it (the ones
        the removal reached: the rest are live again)."""
        for summary in self.summaries.values():
            if summary.level == 0:
                continue
            runs = sorted(summary.absorbed)
            contiguous = all(b[0] == a[1] + 1 for a, b in pairwise(runs))
            span = (summary.first_seq, summary.last_seq)
            if not runs or not contiguous:
                tiled = False
            elif summary.erased:
                tiled = span[0] <= runs[0][0] and runs[-1][1] <= span[1]
            else:
                tiled = (runs[0][0], runs[-1][1]) == span
            if not tiled:
                raise ValidationFailed(
                    f"line {summary.line}: roll-up {summary.first_seq}..{summary.last_seq} "
                    "is not tiled by the summaries it absorbed"
                )


def _check_metadata(number: int, metadata: dict[str, Any] | None, max_bytes: int) -> None:
    """The append's metadata limit, its refusal naming the line."""
    try:
        check_metadata_size(metadata, "metadata", max_bytes)
    except PayloadTooLarge as exc:
        raise PayloadTooLarge(f"line {number}: {exc.detail} (MAX_METADATA_BYTES)") from None


async def import_session(
    database: Database,
    tenant: str,
    chunks: AsyncIterator[bytes],
    max_line_bytes: int,
    external_id: str | None = None,
    *,
    allowed_models: frozenset[str] | None,
    limits: AppendLimits | None = None,
) -> ImportResult:
    """Store the session a JSON Lines file holds (under `external_id` when given), all of it
    or, at the first wrong line, none of it: one transaction, its lines stored in batches as
    they are read. A session naming a summary model outside `allowed_models` is refused, as
    its creation would be; a message over `limits` is refused as its append would be, and its
    tokens are counted again (None, for both, on the operator's own moves: a copy between
    databases this service wrote keeps any model, its sizes and its counts)."""
    async with database.transaction() as db:
        importer = Importer(db, tenant, external_id, allowed_models, limits)
        last = 0
        async for number, raw in numbered_lines(chunks, max_line_bytes):
            await importer.take(number, raw)
            last = number
        return await importer.finish(last)
