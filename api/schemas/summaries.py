"""Summaries, the history a load answers, and `compact`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field

from api.schemas.common import (
    Schema,
)
from api.schemas.messages import (
    MessageOut,
)
from api.session_settings import JSON_INTEGER, SummaryInstructions
from summarizer.triggers import CompactTrigger

if TYPE_CHECKING:
    from api.store.rows import SummaryRow


class SummaryOut(Schema):
    id: int
    """The summary's id."""
    session_id: str
    """The id of its session."""
    level: int
    """0: made from messages; 1 and up: a roll-up of summaries (or a repair)."""
    first_seq: int
    """The first seq it covers."""
    last_seq: int
    """The last seq it covers."""
    first_message_id: int
    """The id of the first message it was made from."""
    last_message_id: int
    """The id of the last message it was made from."""
    message_count: int
    """How many messages it covers."""
    approx_tokens: int
    """Its text's tokens (cl100k)."""
    summary_text: str
    """The summary (empty once erased)."""
    model: str
    """The model that wrote it; `fallback` when written without one."""
    superseded_by: int | None
    """The summary that absorbed it (a roll-up or repair), if any."""
    metadata: dict[str, Any]
    """How it was made: trigger, reason, chunks, depth, tokens, fallback."""
    created_at: datetime
    """When it was stored (UTC)."""
    erased_at: datetime | None = Field(
        description="When a removed message reached this summary (it covered the message or "
        "was made after one that did): its text is erased and it is no longer live."
    )

    @classmethod
    def from_row(cls, row: SummaryRow, session_external_id: str, **extra: Any) -> Self:
        return cls.model_validate({**row._asdict(), "session_id": session_external_id, **extra})


class SummaryDetail(SummaryOut):
    message_ids: list[int]
    """The ids of every message it covers."""


class SummaryList(Schema):
    summaries: list[SummaryOut]
    """The summaries of this page, newest first."""
    next_cursor: str | None
    """`cursor` of the next page; null on the last."""


UnsendableReason = Literal["dangling_reasoning", "orphan_tool_result", "duplicate_tool_result"]
"""Why a stored message is in no context, whatever the budget (`Unsendable.reason`)."""


class Unsendable(Schema):
    id: int
    """The message's id (it is in `messages`)."""
    reason: UnsendableReason = Field(
        description="`dangling_reasoning`: a `reasoning` item with no item after it (the "
        "Responses API refuses it alone; it is sent once the item it led to is appended); "
        "`orphan_tool_result`: a tool result whose call is not before it in `context`; "
        "`duplicate_tool_result`: a second result of a call already answered."
    )


class UnreadMessages(Schema):
    first_seq: int
    """The seq after the newest loaded summary (or the pinned prefix)."""
    last_seq: int
    """The seq before the oldest message in `messages`."""
    count: int
    """How many messages lie between (removed ones not counted)."""


class Omitted(Schema):
    """What `context` leaves out, by kind; the pinned prefix is never left out."""

    messages: list[int]
    """Ids of messages in `messages` left out to fit `max_tokens`, oldest first."""
    unread: UnreadMessages | None
    """Older messages the loader did not read, the budget being spent (left out to fit
    `max_tokens` too); null when none."""
    summaries: list[int]
    """Ids of summaries in `summaries` left out to fit `max_tokens`, oldest first."""
    unsendable: list[Unsendable]
    """Messages in `messages` left out whatever the budget, because the model's API would
    refuse them, in stored order."""


ClearedKind = Literal["tool_result", "tool_input", "file_part"]
"""What a context-editing placeholder stands for (`Cleared.kind`)."""


class Cleared(Schema):
    """A part of a stored message that `context` shows as a placeholder (context editing:
    docs/context-editing.md); the stored message is unchanged."""

    id: int
    """The message's id: `GET /v1/sessions/{id}/messages` holds it as appended."""
    kind: ClearedKind = Field(
        description="`tool_result`: a tool result's content; `tool_input`: the arguments of "
        "the call whose result was cleared; `file_part`: an image or file content part."
    )
    tokens: int
    """The tokens the placeholder saves (what the part counted, less the placeholder's)."""


class History(Schema):
    session_id: str
    """The session's id."""
    pinned: list[MessageOut] = Field(
        description="The pinned prefix (leading system/developer messages no loaded summary "
        "covers): always first in `context`, verbatim, never truncated."
    )
    summaries: list[SummaryOut]
    """The live summaries loaded, oldest first."""
    messages: list[MessageOut]
    """The stored messages after the newest loaded summary that the loader read."""
    context: list[dict[str, Any]]
    """What to send to the model: OpenAI chat messages or Responses items (`format`)."""
    token_estimate: int
    """The tokens of `context`."""
    truncated_messages: int
    """Messages left out of `context` to fit `max_tokens`: `omitted.messages` and
    `omitted.unread`."""
    omitted: Omitted
    """Everything `context` leaves out: messages and summaries (to fit `max_tokens`), and
    messages no context may hold."""
    cleared: list[Cleared]
    """Parts of messages in `context` shown as placeholders (context editing), in stored
    order; empty when the session clears nothing."""
    summarization_pending: bool
    """Whether a summarization of the session is queued or running."""


class CompactRequest(Schema):
    """`overflow_retry` summarizes everything (keep_last_n 0); `manual` keeps the newest."""

    model_config = ConfigDict(extra="forbid", strict=True)
    trigger: CompactTrigger = "manual"
    """`manual` keeps the newest `keep_last_n`; `overflow_retry` summarizes everything but a
    pending user question."""
    keep_last_n: Annotated[int, Field(ge=0, le=1_000_000), *JSON_INTEGER] | None = None
    """Newest messages to leave out (default: the session's setting)."""
    instructions: SummaryInstructions | None = None
    """What this summary must keep (for example "every file path and error message"): given
    to the summarizer after the session's `summary_instructions`, recorded in the summary's
    `metadata.instructions`. Roll-ups and repairs follow the session's."""
    dry_run: bool = False
    """Make the summary (and any roll-up) as a real call would, answer it with the context
    that would result, and store nothing: no summary, no link, no job."""


NothingStored = Literal["nothing_to_summarize", "already_summarized"]
"""Why `compact` stored no summary."""


class CompactResult(Schema):
    """What `compact` stored (without `dry_run`)."""

    dry_run: Literal[False] = False
    """False: the summary is stored."""
    summary: SummaryOut | None
    """The summary made, or null when nothing was left to summarize (`reason` says why)."""
    reason: NothingStored | None = Field(
        description="Why `summary` is null: `nothing_to_summarize` (no message after the newest "
        "live summary lies outside `keep_last_n` and a pending user question, or none could "
        "be cut without parting a tool call from its results or a reasoning item from the "
        "item it led to), `already_summarized` (another summarization stored a summary of "
        "the range while this one waited for the session); null when a summary was made."
    )
    history: History
    """The history after it."""


class SummaryDraftOut(Schema):
    """A summary a dry run made and did not store: what it would hold, without an id or a
    time (those come with storing)."""

    level: int
    """0: made from messages; 1 and up: a roll-up of summaries."""
    first_seq: int
    """The first seq it would cover."""
    last_seq: int
    """The last seq it would cover."""
    message_count: int
    """How many messages it would cover."""
    approx_tokens: int
    """Its text's tokens (cl100k)."""
    summary_text: str
    """The summary."""
    model: str
    """The model that wrote it; `fallback` when written without one."""
    metadata: dict[str, Any]
    """How it was made, as a stored summary's metadata says."""

    @classmethod
    def from_row(cls, row: SummaryRow) -> Self:
        return cls.model_validate(row._asdict())


class CompactPreview(Schema):
    """What `compact` with `dry_run: true` answers: what a real call would store now, and
    the context that would result; nothing is stored."""

    dry_run: Literal[True] = True
    """True: nothing is stored."""
    summary: SummaryDraftOut | None
    """The summary a real call would store, or null when it would store none (`reason`)."""
    reason: NothingStored | None
    """Why `summary` is null (`nothing_to_summarize`, as a real call says it); null when a
    summary was made. A dry run waits for no running summarization, so never
    `already_summarized`."""
    rollups: list[SummaryDraftOut]
    """The roll-ups a real call would store after it (the session over its `summary_limit`),
    in the order it would store them; the last may absorb `summary`."""
    context: list[dict[str, Any]]
    """The context a history load without `max_tokens` would then answer (as a real call's
    `history.context`), with the summary (and roll-ups) in place of what they cover."""
    token_estimate: int
    """The tokens of `context`."""


CompactResponse = CompactResult | CompactPreview
"""What `compact` answers: `CompactResult`, or `CompactPreview` for a dry run (`dry_run`
tells them apart)."""
