"""One model turn of a session held as chat messages, whatever wire asked for it.

A turn: identify the session (the wire's ladder, `api.compat.identify`), reconcile the
request's messages with what is stored (`api.compat.reconcile`: the new tail, or a branch),
fit the session's context (pinned prefix, summaries, unsummarized tail) into what the model's
window leaves after the new tail, the tools and the answer's room, call the model with that
context followed by the new tail, and store the new tail and the answer together, once, when
the answer is complete (in a branch when another turn stored in the session meanwhile). When
the model still answers that the context is too long, the session is summarized (trigger
`overflow_retry`) and the call retried once. A request no session is identified for goes to
the model as it came, and nothing is stored.

The wires (`api.compat.chat_completions`, `api.compat.anthropic_messages`) only translate
their shapes to chat messages and back; they and `api.compat.responses` share the model's
checks, window and answer room (`api.compat.model_limits`).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from api import compact, forks, history_load, metrics, offline_model, store
from api.append.use_case import store_batch
from api.compat import identify, prompt_cache
from api.compat.chat_messages import checked, stored_shape
from api.compat.model_limits import answer_room, check_model, model_window, too_long
from api.compat.reconcile import Reconciled, links, reconcile
from api.context import MISSING_TOOL_RESULT
from api.context_edits import EditOverrides
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.model_tokens import TokenRatios, fitted_window
from api.openai_errors import OpenAIError
from api.schemas import Cleared, CompactRequest, SummaryOut
from api.settings import Settings
from api.store import NewMessage
from api.store import forks as fork_store
from api.summarization import Summarization
from api.upstream import (
    ContextTooLong,
    Upstream,
    UpstreamFailed,
    create_completion,
    open_completion_stream,
)
from summarizer.tokens import count_messages, count_text

REPLY_PRIMING_TOKENS = 3
"""Tokens a chat model adds to every prompt to prime its reply (as OpenAI counts them)."""


SESSION_HEADER_OUT = "x-precis-session"
"""Answer header naming the session a turn was stored in."""

BRANCHED_HEADER = "x-precis-branched-from"
"""Answer header of a turn that branched the session: the id the earlier branch keeps."""

OVERFLOW_HEADER = "x-precis-overflow-retry"
"""Answer header of a turn retried after an `overflow_retry` summary: the summary's id."""

ModelCall = Callable[[Upstream, Mapping[str, Any]], Awaitable[Any]]
"""One call of the model (`create_completion` or `open_completion_stream`)."""


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
    stored_early: list[NewMessage] = field(default_factory=list)
    """A history the session never held, too long to send as it came: stored before the
    model call (`prepare`), so it is fitted like any stored history."""
    early_after: str = ""
    """The link of the message `stored_early` follows ("": the session's start)."""
    named_for_user: bool = False
    """The session was named by a body field or a fingerprint: it holds one of a user's
    conversations, and another of theirs goes to a session of its own (`api.compat.identify`)."""


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
        stateful: bool = True,
    ) -> ChatTurn:
        """Check the model and the messages; identify, reconcile and budget the turn.
        `stateful`: whether a request holding only new messages may be appended to the
        session (a session named per conversation; not one named per user)."""
        model = check_model(self.settings, str(upstream_request["model"]))
        upstream_request = upstream_request | {"model": model}
        if session_id is None:  # a plain proxy call: the messages are the model's to judge
            if model == offline_model.OFFLINE_MODEL:  # Precis's own reads what it stores
                checked([stored_shape(m) for m in messages], self.settings.max_message_bytes)
            turn = ChatTurn(wire, tenant, None, upstream_request, [dict(m) for m in messages], [])
            turn.sent_tokens = _fixed_tokens([], upstream_request) + count_messages(
                [dict(message) for message in messages]
            )
            return turn
        async with self.database.reading() as db:
            # only what the session does not hold yet is shaped, checked and counted
            reconciled = await reconcile(db, tenant, session_id, messages, stateful)
            if (
                reconciled.branch_at is not None
                and not stateful
                and identify.starts_otherwise(messages, reconciled.new_start)
            ):
                # a session named for a user holds one conversation: one starting otherwise is
                # another of theirs, in a session of its own (`api.compat.identify`)
                session_id = identify.another_conversation(tenant, session_id, messages)
                reconciled = await reconcile(db, tenant, session_id, messages, stateful)
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
        turn.named_for_user = not stateful
        turn.stored_new = [
            message._replace(client_id=link)
            for message, link in zip(counted, reconciled.new_links, strict=True)
        ]
        turn.headers[SESSION_HEADER_OUT] = session_id
        window = await model_window(self.settings, model)
        reserved = answer_room(self.settings, window, answer_tokens)
        ratio = await self._ratio(model)
        room = fitted_window(window - reserved, ratio, self.settings.model_token_margin)
        pending = _pending_start(turn.new_messages)
        if room - _fixed_tokens(turn.stored_new[pending:], upstream_request) < 1:
            raise OpenAIError(
                400,
                f"the new turn and tools and the answer's room ({reserved}) do not fit the "
                f"model's window of {window} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        if reconciled.branch_at is not None:
            kept_as = await forks.branch_session(
                self.database, self.settings, tenant, session_id, reconciled.branch_at
            )
            turn.headers[BRANCHED_HEADER] = kept_as
        if room - _fixed_tokens(turn.stored_new, upstream_request) < 1 and pending:
            # a history the session never held, too long to send as it is: stored first, so
            # it is summarized and fitted like any stored history
            await self._append(turn, turn.stored_new[:pending])
            turn.stored_early = turn.stored_new[:pending]
            turn.early_after = turn.reconciled.previous_link if turn.reconciled else ""
            turn.new_messages = turn.new_messages[pending:]
            turn.stored_new = turn.stored_new[pending:]
            turn.reconciled = replace(
                reconciled,
                new_start=reconciled.new_start + pending,
                new_links=reconciled.new_links[pending:],
                previous_link=reconciled.new_links[pending - 1],
            )
        turn.budget = room - _fixed_tokens(turn.stored_new, upstream_request)
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
                loaded = await history_load.fitted_context(
                    db,
                    self.summarization,
                    turn.tenant,
                    turn.session_id,
                    None,
                    turn.budget,
                    "openai",
                    edits=turn.edits,
                )
                context = _without_placeholders_answered_by(
                    loaded.context.messages, turn.new_messages
                )
                context_tokens = loaded.context.token_estimate
                turn.cleared = loaded.cleared()
            except SessionNotFound:
                context_tokens = 0  # the turn's answer creates the session
        turn.sent_tokens = context_tokens + _fixed_tokens(turn.stored_new, turn.upstream_request)
        return prompt_cache.marked(turn.upstream_request, [*context, *turn.new_messages])

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
        await self._append(turn, [*turn.stored_new, counted._replace(client_id=link)])
        self.count(turn, "stored")

    async def _append(self, turn: ChatTurn, batch: list[NewMessage]) -> None:
        """Append `batch` to the turn's session, in a branch when another turn stored in it
        since this one read it (or in a session of its own, `_moved_apart`)."""
        assert turn.session_id is not None
        assert turn.reconciled is not None
        async with _store_lock(turn.tenant, turn.session_id):
            previous = turn.reconciled.previous_link
            moved_at = await self._moved_since_read(turn, previous, batch)
            if moved_at == 0 and turn.named_for_user and await self._moved_apart(turn, batch):
                return
            if moved_at == 0 and turn.stored_early:
                # the history this turn stored first went with another turn's branch: the turn
                # goes on after the message that history followed, and stores it again
                batch = [*turn.stored_early, *batch]
                moved_at = await self._moved_since_read(turn, turn.early_after, batch)
            if moved_at is not None:
                kept_as = await forks.branch_session(
                    self.database, self.settings, turn.tenant, turn.session_id, moved_at
                )
                turn.headers[BRANCHED_HEADER] = kept_as
            await store_batch(self.database, self.settings, turn.tenant, turn.session_id, batch)

    async def _moved_apart(self, turn: ChatTurn, batch: list[NewMessage]) -> bool:
        """Store `batch` in a session of its own when the turn began its conversation in a
        session named for a user, which another of their conversations took meanwhile (two
        first turns raced): not when the session holds the turn's own first user message (a
        retry of the same turn), nor when that session of its own exists already."""
        assert turn.session_id is not None and turn.reconciled is not None
        first_user = next((message for message in batch if message.role == "user"), None)
        if turn.reconciled.previous_link or first_user is None or first_user.client_id is None:
            return False
        async with self.database.reading() as db:
            try:
                session = await store.get_session(db, turn.tenant, turn.session_id)
            except SessionNotFound:
                return False
            if await store.message_by_client_id(db, session.id, first_user.client_id):
                return False
        other = identify.another_conversation(turn.tenant, turn.session_id, turn.new_messages)
        async with _store_lock(turn.tenant, other):
            async with self.database.reading() as db:
                try:
                    await store.get_session(db, turn.tenant, other)
                    return False
                except SessionNotFound:
                    pass
            turn.session_id = turn.headers[SESSION_HEADER_OUT] = other
            await store_batch(self.database, self.settings, turn.tenant, other, batch)
        return True

    async def _moved_since_read(
        self, turn: ChatTurn, previous: str, batch: list[NewMessage]
    ) -> int | None:
        """Where to branch when another turn stored in the session since this one read it
        (two turns at once: a client's retry, an agent's side calls): the seq of the message
        `previous` (the link this turn follows; 0: none, or gone); None when the session's
        newest message is still that one, or one of the `batch` (a retry that landed)."""
        assert turn.session_id is not None
        own = [message.client_id for message in batch]
        async with self.database.reading() as db:
            try:
                session = await store.get_session(db, turn.tenant, turn.session_id)
            except SessionNotFound:
                return None
            newest = await fork_store.message_at(db, session.id, session.last_seq)
            newest_link = (newest.client_id if newest is not None else None) or ""
            if newest_link == previous or newest_link in own:
                return None
            if not previous:
                return 0
            found = await store.message_by_client_id(db, session.id, previous)
        return found.seq if found is not None else 0

    def count(self, turn: ChatTurn, outcome: str) -> None:
        branched = "yes" if BRANCHED_HEADER in turn.headers else "no"
        metrics.WIRE_TURNS.labels(turn.wire, outcome, branched).inc()


_STORE_LOCKS: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)


def _store_lock(tenant: str, session_id: str) -> asyncio.Lock:
    """One turn at a time checks and stores in a session, in this process (replicas may
    still race between the check and the append: the window is one read)."""
    key = (tenant, session_id)
    lock = _STORE_LOCKS.get(key)
    if lock is None:
        lock = _STORE_LOCKS[key] = asyncio.Lock()
    return lock


def _pending_start(messages: Sequence[Mapping[str, Any]]) -> int:
    """Where the turn's own messages begin: after the last answer of the model among them
    (what comes before is history the session did not hold)."""
    answers = [index for index, message in enumerate(messages) if message["role"] == "assistant"]
    return answers[-1] + 1 if answers else 0


def _without_placeholders_answered_by(
    context: Sequence[dict[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The context without the placeholder result it gives a stored call still waiting for
    its result, where the new messages bring that result (the stored call, then its result)."""
    answered = {message.get("tool_call_id") for message in new if message.get("role") == "tool"}
    return [
        message
        for message in context
        if not (
            message.get("role") == "tool"
            and message.get("tool_call_id") in answered
            and message.get("content") == MISSING_TOOL_RESULT
        )
    ]


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
