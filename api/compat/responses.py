"""`POST /v1/responses`: one model turn of a conversation, kept within the model's window.

With `conversation` (or `previous_response_id`, or neither: then the response starts a chain
of its own, `api.compat.stored_responses`), a turn is: check the model, fit the session's
context (pinned prefix, summaries, tail) into what the model's window leaves after
`instructions`, `tools`, the new `input` and the answer's room, call the model with that
context followed by `input`, and store `input` and the output together, once the response
has completed. A turn that fails
(the model, a cut stream, a client gone) stores nothing. When the model still answers that
the context is too long, the stored history is summarized (trigger `overflow_retry`; the new
input stays verbatim) and the call is retried once. Every response answered has a Precis id
and is kept (unless `store` is false, which without `conversation` or `previous_response_id`
passes the request to the model as it came, storing nothing). `precis/offline` (development
mode only) is answered by `api.offline_model` where the model would be called.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api import compact, history_load, metrics, offline_model, service
from api.append.use_case import prepared, store_batch
from api.compaction_items import shown_to_the_model
from api.compat import stored_responses
from api.compat.model_limits import answer_room, model_window, too_long
from api.compat.response_checks import checked_model
from api.compat.response_events import new_id, relayed, with_response_id
from api.compat.turn import OVERFLOW_HEADER, REPLY_PRIMING_TOKENS
from api.context import MISSING_TOOL_RESULT
from api.conversation_items import new_conversation_items
from api.conversations import CONVERSATION_ID_PREFIX, ConversationNotFound
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.model_tokens import TokenRatios, fitted_window
from api.openai_errors import VALIDATION_FAILED, OpenAIError
from api.schemas import CompactRequest, ItemIn, SessionUpdate, SummaryOut
from api.schemas.responses import ResponseRequest
from api.settings import Settings
from api.store import NewMessage, session_for_history
from api.summarization import Summarization
from api.upstream import ContextTooLong, Upstream, UpstreamFailed, create_response, open_stream
from api.validation_words import located_errors
from summarizer.tokens import count_messages, count_text

STORED_STATUSES = frozenset({"completed", "incomplete"})
"""Responses whose output is a turn of the conversation: finished, or cut at
`max_output_tokens`. A failed or cancelled one stores nothing."""

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
"""The stream events that carry a stored response (see `STORED_STATUSES`)."""

ModelCall = Callable[[Upstream, Mapping[str, Any]], Awaitable[Any]]
"""`create_response` or `open_stream`: one call of the model, whole or streamed."""


@dataclass(frozen=True)
class BackgroundRun:
    """What a background response's run gives its turn (`api.background_responses`)."""

    response_id: str
    created_at: int
    """When it was queued: the response keeps it."""
    before_store: Callable[[], Awaitable[None]]
    """Run before the turn is stored; raises `StoringRefused` when it must store nothing."""
    stored: Callable[[dict[str, Any]], None]
    """Given the response once it and its turn are stored: a follower on this replica shows
    it without reading it back."""


@dataclass(frozen=True)
class FittedInput:
    """A request's input checked, counted, and the room it leaves the stored context."""

    items: list[dict[str, Any]]
    counted: list[NewMessage]
    budget: int
    fixed_tokens: int


class StoringRefused(Exception):
    """A background response was cancelled or deleted: its turn stores nothing."""


@dataclass
class Turn:
    """What a conversation turn knows before it calls the model."""

    conversation_id: str
    """The session the turn runs in: the conversation, or the chain's session."""
    request: ResponseRequest
    input_items: list[dict[str, Any]]
    """The input as items, as the model gets them and the conversation keeps them."""
    stored_input: list[NewMessage]
    """The same, checked, counted and given their ids: stored with the output."""
    budget: int
    response_id: str = field(default_factory=lambda: new_id("resp"))
    fixed_tokens: int = 0
    """The tokens of the request besides the stored context: input, instructions, tools."""
    sent_tokens: int = 0
    """The request's tokens as Precis counted them: what the model's usage is compared to."""
    in_conversation: bool = True
    """Whether the turn runs in a conversation, named or the one a previous response's chain
    goes on in (the answer names it then)."""
    new_chain: bool = False
    """The first response of a chain: its session is made by the turn's append."""
    stored: bool = True
    """Whether the turn and its response are kept (`store` not false)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Answer headers the turn adds (`OVERFLOW_HEADER`)."""
    background: BackgroundRun | None = None


@dataclass(frozen=True)
class Responder:
    """A Responses API call's use case, on the app's database, summarizer and settings."""

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

    # --- one response, whole --------------------------------------------------------------

    async def respond(
        self, tenant: str, request: ResponseRequest, background: BackgroundRun | None = None
    ) -> tuple[dict[str, Any], Turn | None]:
        """The response object of a non-streamed request, and its turn (None: passed through)."""
        request.model = checked_model(self.settings, request)
        turn = await self._prepare(tenant, request, background)
        call = _model_call(request, streamed=False)
        if turn is None:
            answer = await self._call(call, _passed_through(request))
            _count("passed_through", None)
            return {**answer, "id": new_id("resp")}, None
        answer = await self._with_overflow_retry(tenant, turn, call)
        answer = self._as_turn_answer(turn, answer)
        if answer.get("status") in STORED_STATUSES:
            await self._store(tenant, turn, answer)
        await self._learn(turn, answer)
        return answer, turn

    # --- one response, streamed -----------------------------------------------------------

    async def open(
        self, tenant: str, request: ResponseRequest
    ) -> tuple[AsyncIterator[dict[str, Any]], Turn | None]:
        """The stream of a streamed request, opened (errors before the first event are raised
        here, so the client gets a plain error answer); its events as JSON."""
        request.model = checked_model(self.settings, request)
        turn = await self._prepare(tenant, request, None)
        call = _model_call(request, streamed=True)
        if turn is None:
            events = await self._call(call, _passed_through(request))
            return with_response_id(
                relayed(events, lambda outcome: _count(outcome, None), True), new_id("resp")
            ), None
        events = await self._with_overflow_retry(tenant, turn, call)
        return self._stored_when_done(tenant, turn, events), turn

    async def _stored_when_done(
        self, tenant: str, turn: Turn, events: AsyncIterator[dict[str, Any]]
    ) -> AsyncIterator[dict[str, Any]]:
        async for event in relayed(events, lambda outcome: _count(outcome, turn), False):
            response = event.get("response")
            if isinstance(response, dict):
                event = {**event, "response": self._as_turn_answer(turn, response)}
            if event.get("type") in TERMINAL_EVENTS and isinstance(response, dict):
                # stored before the client hears the response is done: a client that reads
                # the conversation next sees the turn
                await self._store(tenant, turn, event["response"])
                await self._learn(turn, response)
            yield event

    # --- the steps ------------------------------------------------------------------------

    async def check_input(self, items: Sequence[dict[str, Any]]) -> list[NewMessage]:
        """The input items checked as stored items are (shape, size), given their ids and
        counted: a 400 naming the first item at fault."""
        given: list[ItemIn] = []
        for index, item in enumerate(items):
            try:
                given.extend(new_conversation_items([item]))
            except ValidationError as exc:
                [(_, message), *_] = located_errors(exc.errors(), item)
                param = f"input[{index}]"
                said = f"{param}: {message}"
                raise OpenAIError(400, said, param=param, code=VALIDATION_FAILED) from None
        return await prepared(given, self.settings.max_message_bytes)

    async def fitted(self, request: ResponseRequest) -> FittedInput:
        """The input checked as stored items are (shape, size) and counted, and the budget
        the model's window leaves the stored context: 400 before anything is called or
        stored."""
        items = (
            [{"type": "message", "role": "user", "content": request.input}]
            if isinstance(request.input, str)
            else list(request.input or [])
        )
        counted = await self.check_input(items)
        window = await model_window(self.settings, request.model)
        reserved = answer_room(self.settings, window, request.max_output_tokens)
        fixed = sum(message.token_count for message in counted) + REPLY_PRIMING_TOKENS
        if request.instructions:
            fixed += count_messages([{"role": "system", "content": request.instructions}])
        if request.tools:
            fixed += count_text(json.dumps(request.tools))
        ratio = 1.0
        if request.model != offline_model.OFFLINE_MODEL:
            ratio = await self.ratios.ratio(request.model)
        room = fitted_window(window - reserved, ratio, self.settings.model_token_margin)
        if room - fixed < 1:
            raise OpenAIError(
                400,
                f"the input, instructions and tools ({fixed} tokens) and max_output_tokens "
                f"({reserved}) do not fit the model's window of {window} tokens",
                param="input",
                code="context_length_exceeded",
            )
        return FittedInput(items, counted, room - fixed, fixed)

    async def _prepare(
        self, tenant: str, request: ResponseRequest, background: BackgroundRun | None
    ) -> Turn | None:
        session_id = request.conversation_id()
        response_id = background.response_id if background else new_id("resp")
        if session_id is None and request.previous_response_id is None and request.store is False:
            return None
        given = await self.fitted(request)
        new_chain = False
        if session_id is None and request.previous_response_id is not None:
            continued = await stored_responses.continuation(
                self.database, self.settings, tenant, request.previous_response_id, response_id
            )
            session_id = continued.session_id
        elif session_id is None:
            session_id, new_chain = response_id, True
        return Turn(
            session_id,
            request,
            given.items,
            given.counted,
            given.budget,
            response_id,
            fixed_tokens=given.fixed_tokens,
            sent_tokens=given.fixed_tokens,
            # a chain that goes on in a conversation's session (its newest response named)
            in_conversation=session_id.startswith(CONVERSATION_ID_PREFIX),
            new_chain=new_chain,
            stored=request.store is not False,
            background=background,
        )

    async def _upstream_request(self, tenant: str, turn: Turn) -> dict[str, Any]:
        conversation_id = turn.conversation_id
        if turn.new_chain:
            turn.sent_tokens = turn.fixed_tokens
            return turn.request.passed_through() | {"input": shown_to_the_model(turn.input_items)}
        async with self.database.reading() as db:
            # the history's own first read checks the conversation too: no round trip more
            try:
                start = await session_for_history(db, tenant, conversation_id)
            except SessionNotFound:
                raise ConversationNotFound(conversation_id) from None
            if start.session.format not in (None, "responses"):
                raise ConversationNotFound(conversation_id)
            management = turn.request.context_management
            threshold = management[-1].compact_threshold if management else None
            if (
                threshold is not None
                and start.session.settings.get("max_context_tokens") != threshold
            ):
                update = SessionUpdate(settings={"max_context_tokens": threshold})  # type: ignore[arg-type]
                await service.update_session(
                    self.database, self.settings, tenant, conversation_id, update
                )
                start = await session_for_history(db, tenant, conversation_id)
            if turn.request.truncation == "disabled":
                # the context as it is stored, or OpenAI's refusal: nothing summarized, cut
                loaded = await history_load.load_context(
                    db, self.summarization, start, None, None, "responses"
                )
                if loaded.context.token_estimate > turn.budget:
                    raise _does_not_fit(loaded.context.token_estimate, turn.budget)
            else:
                loaded = await history_load.fitted_context(
                    db,
                    self.summarization,
                    tenant,
                    conversation_id,
                    None,
                    turn.budget,
                    "responses",
                    start,
                )
        context = _without_placeholders_answered_by(loaded.context.messages, turn.input_items)
        turn.sent_tokens = loaded.context.token_estimate + turn.fixed_tokens
        shown = shown_to_the_model([*context, *turn.input_items])
        return turn.request.passed_through() | {"input": shown}

    async def _with_overflow_retry(self, tenant: str, turn: Turn, call: ModelCall) -> Any:
        request = await self._upstream_request(tenant, turn)
        try:
            return await self._call(
                call, request, turn, retrying=turn.request.truncation == "disabled"
            )
        except ContextTooLong:
            summary = await self._summarize_for_overflow(tenant, turn)
            if summary is None:
                raise too_long("input") from None
            turn.headers[OVERFLOW_HEADER] = str(summary)
        return await self._call(call, await self._upstream_request(tenant, turn), turn)

    async def _summarize_for_overflow(self, tenant: str, turn: Turn) -> int | None:
        async with self.database.reading() as db:
            compacted = await compact.compact(
                db,
                self.summarization,
                tenant,
                turn.conversation_id,
                CompactRequest(trigger="overflow_retry"),
            )
        return compacted.summary.id if isinstance(compacted.summary, SummaryOut) else None

    async def _call(
        self,
        call: ModelCall,
        request: dict[str, Any],
        turn: Turn | None = None,
        retrying: bool = True,
    ) -> Any:
        try:
            return await call(self.upstream, request)
        except ContextTooLong:
            if not retrying:
                raise
            _count("model_failed", turn)
            raise too_long("input") from None
        except UpstreamFailed as exc:
            _count("model_failed", turn)
            raise OpenAIError(exc.status, exc.message, param=exc.param, code=exc.code) from None

    async def _learn(self, turn: Turn, response: dict[str, Any]) -> None:
        """Learn the model's token ratio from the input tokens its response reports."""
        reported = (response.get("usage") or {}).get("input_tokens")
        if isinstance(reported, int) and turn.request.model != offline_model.OFFLINE_MODEL:
            await self.ratios.learn(turn.request.model, turn.sent_tokens, reported)

    def _as_turn_answer(self, turn: Turn, response: dict[str, Any]) -> dict[str, Any]:
        """The model's response as this turn's: Precis's response id, the conversation or the
        previous response, and whether it is stored."""
        answer = {
            **response,
            "id": turn.response_id,
            "previous_response_id": turn.request.previous_response_id,
            "store": turn.stored,
        }
        if turn.background is not None:
            answer.update(background=True, created_at=turn.background.created_at)
        if turn.in_conversation:
            answer["conversation"] = {"id": turn.conversation_id}
        return answer

    async def _store(self, tenant: str, turn: Turn, response: dict[str, Any]) -> None:
        """The turn's input and output in one append (both or neither), then the response."""
        if not turn.stored:
            _count("passed_through", turn)
            return
        output = response.get("output") or []
        answer = await prepared(new_conversation_items(output), self.settings.max_message_bytes)
        batch = [*turn.stored_input, *answer]
        if turn.background is not None:
            await turn.background.before_store()
        session = turn.conversation_id
        outcome, _ = await store_batch(self.database, self.settings, tenant, session, batch)
        await stored_responses.record(
            self.database,
            tenant,
            outcome,
            len(turn.stored_input),
            turn.request.previous_response_id,
            response,
        )
        if turn.background is not None:
            turn.background.stored(response)
        _count("stored", turn)


def _passed_through(request: ResponseRequest) -> dict[str, Any]:
    """A request Precis keeps nothing of, as the model is sent it (Precis's compaction items
    shown as the summaries they carry)."""
    given = request.input
    shown = shown_to_the_model(given) if isinstance(given, list) else given
    return request.passed_through() | {"input": shown}


def _model_call(request: ResponseRequest, streamed: bool) -> ModelCall:
    """The model the request names: Precis's own offline model, or one litellm reaches."""
    if request.model == offline_model.OFFLINE_MODEL:
        return offline_model.open_stream if streamed else offline_model.create_response
    return open_stream if streamed else create_response


def _without_placeholders_answered_by(
    context: Sequence[dict[str, Any]], input_items: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The context without the placeholder outputs it gives calls still waiting for theirs,
    where this turn's input brings them (the stored call, then its output in the input)."""
    answered = {
        item.get("call_id") for item in input_items if str(item.get("type", "")).endswith("_output")
    }
    return [
        item
        for item in context
        if not (item.get("call_id") in answered and item.get("output") == MISSING_TOOL_RESULT)
    ]


def _count(outcome: str, turn: Turn | None) -> None:
    retried = turn is not None and OVERFLOW_HEADER in turn.headers
    metrics.RESPONSES.labels(outcome, "yes" if retried else "no").inc()


def _does_not_fit(tokens: int, budget: int) -> OpenAIError:
    return OpenAIError(
        400,
        f"the stored context ({tokens} tokens) does not fit the model's window with this input "
        f"and the answer's room ({budget} tokens left) and truncation is disabled",
        param="input",
        code="context_length_exceeded",
    )
