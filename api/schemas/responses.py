"""The request of `POST /v1/responses`: OpenAI's Responses API `create`, as far as Precis reads it.

The fields Precis acts on, and the common ones it keeps or echoes, are declared (a value of the
wrong type is a 400 naming it, never stored); every other field is kept as sent (`extra`) and
passed to the model untouched, so a provider's newer parameters keep working.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from api.schemas.common import SESSION_ID_PATTERN, WireRequest
from api.schemas.conversations import Metadata


class ConversationRef(BaseModel):
    """`conversation` given as an object, as the SDKs may send it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    id: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=128)]
    """The conversation's id."""


class Compaction(BaseModel):
    """`context_management` entry: summarize once the unsummarized tail reaches the threshold."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    type: Literal["compaction"]
    """The only kind of context management: Precis's summaries."""
    compact_threshold: Annotated[int, Field(ge=1, le=10_000_000)]
    """Tokens of unsummarized conversation that start a summary (the conversation's
    `max_context_tokens`)."""


class ResponseRequest(WireRequest):
    """A Responses API request. With `conversation`, Precis supplies the conversation's context
    before `input` and stores the turn; without it, the request is passed through."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """A litellm model string the server allows (MODEL_ALLOWED)."""
    input: str | Annotated[list[dict[str, Any]], Field(max_length=500)] | None = None
    """Text (one user message) or Responses input items; may be left out when `conversation`
    or `previous_response_id` gives the context (the model answers what is stored)."""
    truncation: Literal["auto", "disabled"] | None = None
    """`auto` (Precis's default): summaries fit the context to the window. `disabled`: a
    context that does not fit as it is stored is 400 `context_length_exceeded`."""
    conversation: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=128)] | (
        ConversationRef | None
    ) = None
    """The conversation this turn belongs to (an id, or `{"id": ...}`)."""
    stream: StrictBool = False
    """Relay the model's server-sent events as they come."""
    instructions: str | None = None
    """A system message for this call only; not stored in the conversation."""
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    """Longest answer; kept free of the window when the context is fitted."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions, passed through (their tokens are kept free of the window)."""
    context_management: list[Compaction] | None = None
    """`[{"type": "compaction", "compact_threshold": N}]`: the conversation's proactive
    summary threshold."""
    previous_response_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """The response this turn continues (its chain's session; not with `conversation`)."""
    store: StrictBool | None = None
    """Passed through without a conversation; a conversation always stores its turns."""
    background: StrictBool | None = None
    """Run the turn on the worker: answered `queued` at once; poll `GET /v1/responses/{id}`."""
    prompt: dict[str, Any] | None = None
    """Not supported (a prompt template stored at the provider)."""
    metadata: Metadata | None = None
    """Kept with the response and echoed (OpenAI's rules: at most 16 pairs of strings)."""
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    """Passed to the model."""
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    """Passed to the model."""
    tool_choice: str | dict[str, Any] | None = None
    """Passed to the model: `auto`, `none`, `required`, or an object naming a tool."""
    parallel_tool_calls: StrictBool | None = None
    """Passed to the model."""
    max_tool_calls: Annotated[int, Field(ge=0)] | None = None
    """Passed to the model."""
    text: dict[str, Any] | None = None
    """Passed to the model: the answer's format."""
    reasoning: dict[str, Any] | None = None
    """Passed to the model: a reasoning model's effort and summary."""
    include: list[str] | None = None
    """Passed to the model: extra output to include."""
    user: str | None = None
    """Passed to the model: the end user's id."""

    def conversation_id(self) -> str | None:
        conversation = self.conversation
        return conversation.id if isinstance(conversation, ConversationRef) else conversation

    def passed_through(self) -> dict[str, Any]:
        """The fields sent to the model as the client gave them (Precis's own left out)."""
        return self.model_dump(
            exclude_unset=True,
            exclude={
                "conversation",
                "context_management",
                "stream",
                "input",
                "previous_response_id",
                "background",
            },
        )


class InputTokensRequest(WireRequest):
    """`POST /v1/responses/input_tokens`: a Responses request, as far as its count reads it."""

    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """The model the count is for (its own encoding, or its learned ratio); cl100k without."""
    input: str | Annotated[list[dict[str, Any]], Field(max_length=500)] | None = None
    """Text or items."""
    conversation: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=128)] | (
        ConversationRef | None
    ) = None
    """A conversation whose stored context comes first."""
    previous_response_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """A stored response whose chain's context comes first."""
    instructions: str | None = None
    """A system message."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions."""
    truncation: Literal["auto", "disabled"] | None = None
    """`disabled`: the stored context counted whole, as a turn that may not summarize sends
    it; `auto` (the default): as it is fitted to the model's window."""

    def conversation_id(self) -> str | None:
        conversation = self.conversation
        return conversation.id if isinstance(conversation, ConversationRef) else conversation


class CompactionRequest(WireRequest):
    """`POST /v1/responses/compact`: what to compact. OpenAI's other fields (prompt caching,
    images, service tier) are accepted and have no effect here."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """The model the compacted context is for (checked as `/v1/responses` checks it)."""
    input: str | Annotated[list[dict[str, Any]], Field(max_length=500)] | None = None
    """Text or items to compact, when no conversation or chain is named."""
    conversation: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=128)] | (
        ConversationRef | None
    ) = None
    """A conversation to compact (a Precis extension: OpenAI's compact names none)."""
    previous_response_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """A stored response whose chain to compact."""
    instructions: str | None = None
    """Accepted; the summary follows the session's summary instructions."""

    def conversation_id(self) -> str | None:
        conversation = self.conversation
        return conversation.id if isinstance(conversation, ConversationRef) else conversation
