"""One model turn of a session held as chat messages, whatever wire asked for it.

A turn: identify the session (the wire's ladder, `api.compat.identify`), reconcile the
request's messages with what is stored (`api.compat.reconcile`: the new tail, or a branch),
fit the session's context (pinned prefix, summaries, unsummarized tail) into what the model's
window leaves after the new tail, the tools and the answer's room, call the model with that
context followed by the new tail, and store the new tail and the answer together, once, when
the answer is complete. When the model still answers that the context is too long, the
session is summarized (trigger `overflow_retry`) and the call retried once. A request no
session is identified for goes to the model as it came, and nothing is stored.

The wires (`api.compat.chat_completions`, `api.compat.anthropic_messages`) only translate
their shapes to chat messages and back; `api.compat.responses` shares the model checks, the
window and the answer's room (`check_model`, `model_window`, `answer_room`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from api import compact, forks, metrics, offline_model, service
from api.append.use_case import new_message, store_batch
from api.compat.reconcile import Reconciled, links, reconcile
from api.context import SUMMARY_HEADING
from api.context_edits import EditOverrides
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.model_tokens import TokenRatios, fitted_window
from api.openai_errors import OpenAIError
from api.schemas import Cleared, CompactRequest, SummaryOut
from api.schemas.messages import MessageIn
from api.settings import Settings
from api.store import NewMessage
from api.summarization import Summarization
from api.upstream import (
    ContextTooLong,
    Upstream,
    UpstreamFailed,
    create_completion,
    open_completion_stream,
)
from summarizer.llm import model_context_window
from summarizer.tokens import count_messages, count_text

REPLY_PRIMING_TOKENS = 3
"""Tokens a chat model adds to every prompt to prime its reply (as OpenAI counts them)."""

DEFAULT_OUTPUT_SHARE = 4
"""Without a request's answer length, the answer's room is MODEL_DEFAULT_OUTPUT_TOKENS, but
never more than a quarter of the window (a small model keeps room for its context)."""

STORED_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
"""What a stored chat message keeps of a wire's message: what a model reads of it."""

SESSION_HEADER_OUT = "x-precis-session"
"""Answer header naming the session a turn was stored in."""

BRANCHED_HEADER = "x-precis-branched-from"
"""Answer header of a turn that branched the session: the id the earlier branch keeps."""

OVERFLOW_HEADER = "x-precis-overflow-retry"
"""Answer header of a turn retried after an `overflow_retry` summary: the summary's id."""

ANTHROPIC_MODELS = ("anthropic/", "claude-")
"""Model names litellm sends to Anthropic: their summaries carry a prompt-cache breakpoint."""

EPHEMERAL = {"type": "ephemeral"}
"""Anthropic's prompt-cache mark (`cache_control`)."""

_MESSAGE = TypeAdapter(MessageIn)

ModelCall = Callable[[Upstream, Mapping[str, Any]], Awaitable[Any]]
"""One call of the model (`create_completion` or `open_completion_stream`)."""


def check_model(settings: Settings, model: str) -> None:
    """The model is one this server lets clients call (MODEL_ALLOWED), or Precis's offline
    model in development mode."""
    if model == offline_model.OFFLINE_MODEL:
        if settings.tenant_keys():
            raise OpenAIError(
                400,
                f"model {model!r} is Precis's offline model, for development mode only (no "
                "API_KEYS configured): name a model of MODEL_ALLOWED",
                param="model",
                code="model_not_allowed",
            )
        return
    allowed = settings.responses_models()
    if "*" not in allowed and model not in allowed:
        raise OpenAIError(
            400,
            f"model {model!r} is not allowed on this server (MODEL_ALLOWED)",
            param="model",
            code="model_not_allowed",
        )


async def model_window(settings: Settings, model: str) -> int:
    """The model's context window: MODEL_CONTEXT_TOKENS, else what litellm knows."""
    window = settings.model_windows().get(model)
    if window is None and model == offline_model.OFFLINE_MODEL:
        window = offline_model.OFFLINE_WINDOW
    window = window or await model_context_window(model)
    if window is None:
        raise OpenAIError(
            400,
            f"the context window of model {model!r} is unknown: set it in MODEL_CONTEXT_TOKENS",
            param="model",
            code="unknown_window",
        )
    return window


def answer_room(settings: Settings, window: int, requested: int | None) -> int:
    """Tokens kept free for the answer."""
    return requested or min(settings.model_default_output_tokens, window // DEFAULT_OUTPUT_SHARE)


def too_long(param: str = "messages") -> OpenAIError:
    return OpenAIError(
        400,
        "the conversation does not fit the model's context window, even summarized",
        param=param,
        code="context_length_exceeded",
    )


def stored_shape(message: Mapping[str, Any]) -> dict[str, Any]:
    """A wire's chat message as Precis stores it: what a model reads, without the optional
    fields SDKs add (`refusal`, `annotations`, nulls) or cache marks."""
    shape = {key: message[key] for key in STORED_KEYS if message.get(key) is not None}
    if isinstance(shape.get("content"), list):
        shape["content"] = [
            {key: value for key, value in part.items() if key != "cache_control"}
            if isinstance(part, Mapping)
            else part
            for part in shape["content"]
        ]
    if "tool_calls" in shape:
        calls = [
            {"id": call.get("id"), "type": "function", "function": call.get("function")}
            for call in shape["tool_calls"]
            if isinstance(call, Mapping)
        ]
        if calls:
            shape["tool_calls"] = calls
        else:
            del shape["tool_calls"]
    if shape.get("role") == "assistant" and "content" not in shape and "tool_calls" not in shape:
        shape["content"] = ""
    return shape


def checked(
    messages: Sequence[Mapping[str, Any]], max_bytes: int, offset: int = 0
) -> list[NewMessage]:
    """The messages checked as an append checks them (shape, size) and counted: a 400 naming
    the first one at fault (`messages[offset + i]`)."""
    counted: list[NewMessage] = []
    for index, message in enumerate(messages, start=offset):
        try:
            given = _MESSAGE.validate_python(message)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"][1:])
            param = f"messages[{index}]" + (f".{where}" if where else "")
            raise OpenAIError(400, f"{param}: {error['msg']}", param=param) from None
        counted.append(new_message(given, max_bytes, index))
    return counted


@dataclass
class ChatTurn:
    """What a turn knows before it calls the model."""

    wire: str
    """`chat_completions` or `messages`: the metrics' label."""
    tenant: str
    session_id: str | None
    """The identified session (None: a plain proxy call, nothing stored)."""
    upstream_request: dict[str, Any]
    """The request's own parameters for the model (`model`, `tools`, ...), without messages."""
    new_messages: list[dict[str, Any]]
    stored_new: list[NewMessage]
    """The new messages, checked, counted and given their links: stored with the answer."""
    reconciled: Reconciled | None = None
    budget: int = 0
    sent_tokens: int = 0
    """The request's tokens as Precis counted them (the context and the new messages)."""
    edits: EditOverrides | None = None
    """The request's context editing, on top of the session's (Anthropic's `context_management`)."""
    cleared: list[Cleared] = field(default_factory=list)
    """What the context sent upstream cleared (context editing)."""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatTurns:
    """The turn use case, on the app's database, summarizer and settings."""

    database: Database
    summarization: Summarization
    settings: Settings
    ratios: TokenRatios

    @property
    def upstream(self) -> Upstream:
        key = self.settings.model_api_key
        return Upstream(
            api_base=self.settings.model_api_base,
            api_key=key.get_secret_value() if key else None,
            timeout_seconds=self.settings.model_timeout_seconds,
        )

    async def prepare(
        self,
        wire: str,
        tenant: str,
        session_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        upstream_request: dict[str, Any],
        answer_tokens: int | None,
    ) -> ChatTurn:
        """Check the model and the messages; identify, reconcile and budget the turn."""
        model = str(upstream_request["model"])
        check_model(self.settings, model)
        if session_id is None:
            turn = ChatTurn(wire, tenant, None, upstream_request, [dict(m) for m in messages], [])
            turn.sent_tokens = _fixed_tokens([], upstream_request) + count_messages(
                [dict(message) for message in messages]
            )
            return turn
        async with self.database.reading() as db:
            # only what the session does not hold yet is shaped, checked and counted
            reconciled = await reconcile(db, tenant, session_id, messages)
        if reconciled.format not in (None, "openai"):
            raise OpenAIError(
                409,
                f"session {session_id!r} holds Responses items; the chat wires keep chat "
                "messages: name another session",
                param="session",
                code="session_format",
            )
        new = [stored_shape(message) for message in messages[reconciled.new_start :]]
        counted = checked(new, self.settings.max_message_bytes, reconciled.new_start)
        turn = ChatTurn(wire, tenant, session_id, upstream_request, new, [], reconciled)
        if reconciled.branch_at is not None:
            kept_as = await forks.branch_session(
                self.database, self.settings, tenant, session_id, reconciled.branch_at
            )
            turn.headers[BRANCHED_HEADER] = kept_as
        turn.stored_new = [
            message._replace(client_id=link)
            for message, link in zip(counted, reconciled.new_links, strict=True)
        ]
        turn.headers[SESSION_HEADER_OUT] = session_id
        window = await model_window(self.settings, model)
        reserved = answer_room(self.settings, window, answer_tokens)
        ratio = await self._ratio(model)
        room = fitted_window(window - reserved, ratio, self.settings.model_token_margin)
        fixed = _fixed_tokens(turn.stored_new, upstream_request)
        turn.budget = room - fixed
        if turn.budget < 1:
            raise OpenAIError(
                400,
                f"the new messages and tools ({fixed} tokens) and the answer's room ({reserved})"
                f" do not fit the model's window of {window} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        return turn

    async def _ratio(self, model: str) -> float:
        return 1.0 if model == offline_model.OFFLINE_MODEL else await self.ratios.ratio(model)

    async def learn(self, turn: ChatTurn, usage: Mapping[str, Any] | None) -> None:
        """Learn the model's token ratio from the usage its answer reports."""
        model = str(turn.upstream_request["model"])
        reported = (usage or {}).get("prompt_tokens")
        if isinstance(reported, int) and model != offline_model.OFFLINE_MODEL:
            await self.ratios.learn(model, turn.sent_tokens, reported)

    async def call(self, turn: ChatTurn, call: ModelCall) -> Any:
        """Call the model with the turn's context; once more after summarizing, when the
        model answers that the context is too long."""
        if turn.session_id is None:
            request = turn.upstream_request | {"messages": turn.new_messages}
            return await self._call(turn, call, request, retrying=True)
        try:
            return await self._call(turn, call, await self._request(turn), retrying=False)
        except ContextTooLong:
            summary = await self._summarize_for_overflow(turn)
            if summary is None:
                raise too_long() from None
            turn.headers[OVERFLOW_HEADER] = str(summary)
        return await self._call(turn, call, await self._request(turn), retrying=True)

    async def _request(self, turn: ChatTurn) -> dict[str, Any]:
        assert turn.session_id is not None
        context: list[dict[str, Any]] = []
        async with self.database.reading() as db:
            try:
                history = await service.history(
                    db,
                    self.summarization,
                    turn.tenant,
                    turn.session_id,
                    None,
                    turn.budget,
                    "openai",
                    edits=turn.edits,
                )
                context = _cache_breakpoint(history.context, turn.upstream_request["model"])
                context_tokens = history.token_estimate
                turn.cleared = list(history.cleared)
            except SessionNotFound:
                context_tokens = 0  # the turn's answer creates the session
        turn.sent_tokens = context_tokens + _fixed_tokens(turn.stored_new, turn.upstream_request)
        return turn.upstream_request | {"messages": [*context, *turn.new_messages]}

    async def _summarize_for_overflow(self, turn: ChatTurn) -> int | None:
        assert turn.session_id is not None
        async with self.database.reading() as db:
            try:
                compacted = await compact.compact(
                    db,
                    self.summarization,
                    turn.tenant,
                    turn.session_id,
                    CompactRequest(trigger="overflow_retry"),
                )
            except SessionNotFound:
                return None
        return compacted.summary.id if isinstance(compacted.summary, SummaryOut) else None

    async def _call(
        self, turn: ChatTurn, call: ModelCall, request: dict[str, Any], retrying: bool
    ) -> Any:
        try:
            return await call(self.upstream, request)
        except ContextTooLong:
            if not retrying:
                raise
            self.count(turn, "model_failed")
            raise too_long() from None
        except UpstreamFailed as exc:
            self.count(turn, "model_failed")
            raise OpenAIError(exc.status, exc.message, param=exc.param, code=exc.code) from None

    async def store(self, turn: ChatTurn, answer: Mapping[str, Any]) -> None:
        """The turn's new messages and the model's answer (a chat assistant message) in one
        append: both or neither; a retried turn stores them once (their links)."""
        if turn.session_id is None or turn.reconciled is None:
            self.count(turn, "passed_through")
            return
        shaped = stored_shape(answer)
        [counted] = checked([shaped], self.settings.max_message_bytes)
        [link] = links([shaped], after=turn.reconciled.last_link)
        batch = [*turn.stored_new, counted._replace(client_id=link)]
        await store_batch(self.database, self.settings, turn.tenant, turn.session_id, batch)
        self.count(turn, "stored")

    def count(self, turn: ChatTurn, outcome: str) -> None:
        branched = "yes" if BRANCHED_HEADER in turn.headers else "no"
        metrics.WIRE_TURNS.labels(turn.wire, outcome, branched).inc()


def _cache_breakpoint(context: Sequence[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The context, its newest summary marked as a prompt-cache breakpoint when the model is
    Anthropic's: the cached prefix (pinned messages and summaries) then holds until the next
    summary."""
    messages = list(context)
    if not model.startswith(ANTHROPIC_MODELS):
        return messages
    summaries = [
        index
        for index, message in enumerate(messages)
        if isinstance(message.get("content"), str)
        and message["content"].startswith(SUMMARY_HEADING)
    ]
    if summaries:
        newest = messages[summaries[-1]]
        part = {"type": "text", "text": newest["content"], "cache_control": EPHEMERAL}
        messages[summaries[-1]] = {**newest, "content": [part]}
    return messages


def _fixed_tokens(new: Sequence[NewMessage], request: Mapping[str, Any]) -> int:
    """Tokens of a request besides the stored context: the new messages, the reply's priming
    and the tools."""
    tokens = sum(message.token_count for message in new) + REPLY_PRIMING_TOKENS
    if request.get("tools"):
        tokens += count_text(json.dumps(request["tools"]))
    return tokens


def model_call(turn: ChatTurn, streamed: bool) -> ModelCall:
    """The model the turn names: Precis's own offline model, or one litellm reaches."""
    if turn.upstream_request.get("model") == offline_model.OFFLINE_MODEL:
        return offline_model.open_completion_stream if streamed else offline_model.create_completion
    return open_completion_stream if streamed else create_completion


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tokens of chat messages as Precis counts them, with the reply's priming."""
    return count_messages([dict(message) for message in messages]) + REPLY_PRIMING_TOKENS
