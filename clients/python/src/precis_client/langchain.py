"""`PrecisChatMessageHistory`: a LangChain chat history kept by Precis (extra `langchain`).

Messages are stored as OpenAI chat messages; `messages` is the summarized view, so a long
conversation comes back as its summaries (`SystemMessage`s) plus the messages after them.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        InvalidToolCall,
        SystemMessage,
        ToolCall,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "PrecisChatMessageHistory needs LangChain: pip install 'precis-client[langchain]'"
    ) from exc

from precis_client._core import DEFAULT_BASE_URL, DEFAULT_TIMEOUT_SECONDS, MAX_BATCH
from precis_client.client import AsyncClientPerLoop, AsyncPrecisClient, PrecisClient
from precis_client.errors import SessionNotFound
from precis_client.types import History

__all__ = ["PrecisChatMessageHistory", "from_openai", "to_openai"]

ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
"""LangChain's message types and the chat roles they are stored as."""


class PrecisChatMessageHistory(BaseChatMessageHistory):
    """A chat history in the Precis session `session_id` (created by its first message).

    Reads answer the summarized history, fitted to `max_tokens` when given; the sync methods
    use a `PrecisClient`, the async ones an `AsyncPrecisClient`, each opened on first use.
    """

    def __init__(
        self,
        session_id: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_tokens: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.max_tokens = max_tokens
        self._connect = (base_url, api_key, timeout)
        self._sync: PrecisClient | None = None
        self._async = AsyncClientPerLoop(
            lambda: AsyncPrecisClient(base_url, api_key=api_key, timeout=timeout)
        )

    def _client(self) -> PrecisClient:
        if self._sync is None:
            base_url, api_key, timeout = self._connect
            self._sync = PrecisClient(base_url, api_key=api_key, timeout=timeout)
        return self._sync

    def _aclient(self) -> AsyncPrecisClient:
        return self._async.get()

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # a plain attribute there
        """The summarized history: summaries as `SystemMessage`s, then the later messages."""
        try:
            history = self._client().history(
                self.session_id, max_tokens=self.max_tokens, format="openai"
            )
        except SessionNotFound:
            return []
        return _context(history)

    async def aget_messages(self) -> list[BaseMessage]:
        try:
            history = await self._aclient().history(
                self.session_id, max_tokens=self.max_tokens, format="openai"
            )
        except SessionNotFound:
            return []
        return _context(history)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages in one request per 500; each gets a random `client_id`, so a
        retried append stores it once."""
        for batch in _batches(messages):
            self._client().append_messages(self.session_id, batch)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        for batch in _batches(messages):
            await self._aclient().append_messages(self.session_id, batch)

    def clear(self) -> None:
        """Delete the session with its messages and summaries."""
        with contextlib.suppress(SessionNotFound):
            self._client().delete_session(self.session_id)

    async def aclear(self) -> None:
        with contextlib.suppress(SessionNotFound):
            await self._aclient().delete_session(self.session_id)


def _context(history: History) -> list[BaseMessage]:
    return [from_openai(message) for message in history["context"]]


def _batches(messages: Sequence[BaseMessage]) -> list[list[dict[str, Any]]]:
    stored = [{**to_openai(message), "client_id": uuid.uuid4().hex} for message in messages]
    return [stored[start : start + MAX_BATCH] for start in range(0, len(stored), MAX_BATCH)]


def to_openai(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as an OpenAI chat message; ValueError for one it has no shape for
    (a tool call without an id, a `FunctionMessage`, a `ChatMessage` of another role)."""
    if isinstance(message, ChatMessage):
        role = message.role
    elif message.type in ROLES:
        role = ROLES[message.type]
    else:
        raise ValueError(f"a {type(message).__name__} has no OpenAI chat shape")
    content: Any = _content(message.content)
    out: dict[str, Any] = {"role": role, "content": content}
    if message.name is not None:
        out["name"] = message.name
    if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
        out["tool_calls"] = [
            *(
                _tool_call(call["id"], call["name"], json.dumps(call["args"], ensure_ascii=False))
                for call in message.tool_calls
            ),
            *(
                _tool_call(call["id"], call["name"], call["args"] or "")
                for call in message.invalid_tool_calls
            ),
        ]
        if content == "":
            out["content"] = None
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    return out


def from_openai(message: dict[str, Any]) -> BaseMessage:
    """An OpenAI chat message (`system` and `developer` alike) as a LangChain message."""
    role = message.get("role")
    content = message.get("content")
    content = "" if content is None else content
    name = message.get("name")
    if role in ("system", "developer"):
        return SystemMessage(content=content, name=name)
    if role == "user":
        return HumanMessage(content=content, name=name)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=message["tool_call_id"], name=name)
    if role == "assistant":
        calls: list[ToolCall] = []
        invalid: list[InvalidToolCall] = []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            try:
                args = json.loads(function["arguments"])
            except ValueError as exc:
                args = None
                error = f"arguments are not JSON: {exc}"
            else:
                error = "arguments are not a JSON object"
            if isinstance(args, dict):
                calls.append(ToolCall(name=function["name"], args=args, id=call["id"]))
            else:
                invalid.append(
                    InvalidToolCall(
                        type="invalid_tool_call",
                        name=function["name"],
                        args=function["arguments"],
                        id=call["id"],
                        error=error,
                    )
                )
        return AIMessage(content=content, name=name, tool_calls=calls, invalid_tool_calls=invalid)
    raise ValueError(f"a message of role {role!r} has no LangChain shape")


def _content(content: str | list[str | dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text as it is; a list of content blocks as OpenAI parts (plain strings as text)."""
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": part} if isinstance(part, str) else part for part in content]


def _tool_call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    """An OpenAI tool call; invalid tool calls keep their unparsed arguments."""
    if not call_id or not name:
        raise ValueError(f"tool call {name!r} needs an id and a name to be stored")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
