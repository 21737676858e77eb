"""The JSON the service answers, as TypedDicts: the dicts `response.json()` gives, typed.

Timestamps stay ISO 8601 strings, as sent.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Format = Literal["openai", "responses"]
"""A session's message format: OpenAI chat messages, or Responses API items."""

CompactTrigger = Literal["manual", "overflow_retry"]
"""`manual` keeps the newest messages out of the summary; `overflow_retry` summarizes all."""


class Session(TypedDict):
    id: str
    metadata: dict[str, Any]
    settings: dict[str, Any]
    effective_settings: NotRequired[dict[str, Any]]
    """Every per-session setting in force (servers from issue 17 on)."""
    format: Format | None
    message_count: int
    summary_count: int
    last_seq: int
    created_at: str
    updated_at: str


class Message(TypedDict):
    """A stored message; in a `responses` session `item` is the item as appended and the
    chat fields are how the summarizer reads it."""

    id: int
    seq: int
    role: str
    content: str | list[dict[str, Any]] | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int
    created_at: str
    item: dict[str, Any] | None


class ItemEntry(TypedDict):
    """One Responses item to append, with Precis' own `metadata` and `client_id` beside it."""

    item: dict[str, Any]
    metadata: NotRequired[dict[str, Any]]
    client_id: NotRequired[str]


class Summarization(TypedDict):
    scheduled: bool
    reason: str | None


class Appended(TypedDict):
    """The answer of an append: the stored messages (or the ones already stored under the
    same `client_id`) and whether a summary was scheduled."""

    messages: list[Message]
    summarization: Summarization


class Popped(TypedDict):
    message: Message
    """The removed message, as it was appended (the rest of its tool-call exchange is hidden
    from every view, and is popped in turn)."""


class Summary(TypedDict):
    id: int
    session_id: str
    level: int
    first_seq: int
    last_seq: int
    first_message_id: int
    last_message_id: int
    message_count: int
    approx_tokens: int
    summary_text: str
    model: str
    superseded_by: int | None
    metadata: dict[str, Any]
    created_at: str
    erased_at: str | None


class SummaryDetail(Summary):
    message_ids: list[int]


class Unsendable(TypedDict):
    id: int
    reason: Literal["dangling_reasoning", "orphan_tool_result", "duplicate_tool_result"]


class UnreadMessages(TypedDict):
    first_seq: int
    last_seq: int
    count: int


class Omitted(TypedDict):
    """What `context` leaves out: message and summary ids dropped to fit `max_tokens`, older
    messages never read for it, and messages no model API would take."""

    messages: list[int]
    unread: UnreadMessages | None
    summaries: list[int]
    unsendable: list[Unsendable]


class History(TypedDict):
    """The history loader's answer; `context` is what to send to the model."""

    session_id: str
    pinned: list[Message]
    summaries: list[Summary]
    messages: list[Message]
    context: list[dict[str, Any]]
    token_estimate: int
    truncated_messages: int
    omitted: Omitted
    summarization_pending: bool


class Compacted(TypedDict):
    summary: Summary | None
    reason: Literal["nothing_to_summarize", "already_summarized"] | None
    """Why `summary` is null (null when a summary was made)."""
    history: History


class SessionPage(TypedDict):
    sessions: list[Session]
    next_cursor: str | None


class MessagePage(TypedDict):
    messages: list[Message]
    next_cursor: str | None
    """The `after_seq` of the next page."""


class SummaryPage(TypedDict):
    summaries: list[Summary]
    next_cursor: str | None
