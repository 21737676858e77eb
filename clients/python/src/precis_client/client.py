"""`PrecisClient` (sync) and `AsyncPrecisClient`: one method per `/v1` endpoint.

Both build their requests and read their answers through `_core`; they differ only in how a
request is sent and how a retry waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from precis_client import _core
from precis_client._core import DEFAULT_BASE_URL, DEFAULT_TIMEOUT_SECONDS, Call, RetryPolicy
from precis_client.types import (
    Appended,
    Compacted,
    CompactTrigger,
    Format,
    History,
    ItemEntry,
    MessagePage,
    Popped,
    Session,
    SessionPage,
    SummaryDetail,
    SummaryPage,
)

T = TypeVar("T")


class PrecisClient:
    """A synchronous client of the Precis REST API.

    Error answers raise `PrecisError` subclasses (`precis_client.errors`); 503 and the
    transient 409s are retried as `retry` says. Close it, or use it as a context manager.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url,
            headers=_core.headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def _send(self, call: Call[T]) -> T:
        attempt = 1
        while True:
            response = self._http.send(call.request(self._http))
            delay = _core.retry_delay(self._retry, attempt, response, call.repeatable)
            if delay is None:
                return _core.outcome(call, response)
            response.close()
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def create_session(
        self,
        session_id: str | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
        format: Format | None = None,
    ) -> Session:
        """Create a session (an id is generated when none is given); `SessionExists` if taken."""
        return self._send(_core.create_session(session_id, metadata, settings, format))

    def list_sessions(self, *, limit: int | None = None, cursor: str | None = None) -> SessionPage:
        """One page of sessions, newest first; pass `next_cursor` back for the next."""
        return self._send(_core.list_sessions(limit, cursor))

    def get_session(self, session_id: str) -> Session:
        return self._send(_core.get_session(session_id))

    def update_session(
        self,
        session_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Session:
        """Replace the session's `metadata` and/or `settings` (the ones given)."""
        return self._send(_core.update_session(session_id, metadata, settings))

    def delete_session(self, session_id: str) -> None:
        """Delete the session with its messages and summaries."""
        self._send(_core.delete_session(session_id))

    def append_messages(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> Appended:
        """Append 1..500 chat messages (OpenAI shape plus `metadata`, `client_id`); creates the
        session if missing."""
        return self._send(_core.append_messages(session_id, messages))

    def append_items(self, session_id: str, items: Sequence[ItemEntry]) -> Appended:
        """Append 1..500 Responses items, each as `{"item": ..., "client_id"?, "metadata"?}`;
        creates the session if missing."""
        return self._send(_core.append_items(session_id, items))

    def list_messages(
        self, session_id: str, *, after_seq: int | None = None, limit: int | None = None
    ) -> MessagePage:
        """Stored messages in order, summarized or not (removed ones never)."""
        return self._send(_core.list_messages(session_id, after_seq, limit))

    def remove_message(self, session_id: str, message_id: int) -> None:
        """Remove one message, with the rest of its tool-call exchange."""
        self._send(_core.remove_message(session_id, message_id))

    def pop_message(self, session_id: str) -> Popped:
        """Remove the newest message and answer it; `MessageNotFound` when none is left."""
        return self._send(_core.pop_message(session_id))

    def history(
        self,
        session_id: str,
        *,
        summary_limit: int | None = None,
        max_tokens: int | None = None,
        format: Format | None = None,
    ) -> History:
        """The summarized history; its `context` is ready to send to a model."""
        return self._send(_core.history(session_id, summary_limit, max_tokens, format))

    def compact(
        self,
        session_id: str,
        *,
        trigger: CompactTrigger | None = None,
        keep_last_n: int | None = None,
    ) -> Compacted:
        """Summarize now, inline; the new summary (None if nothing was due) and the history."""
        return self._send(_core.compact(session_id, trigger, keep_last_n))

    def list_summaries(
        self,
        session_id: str,
        *,
        include_superseded: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SummaryPage:
        """The session's summaries, newest first."""
        return self._send(_core.list_summaries(session_id, include_superseded, limit, cursor))

    def get_summary(self, summary_id: int) -> SummaryDetail:
        """One summary with the ids of its source messages."""
        return self._send(_core.get_summary(summary_id))


class AsyncPrecisClient:
    """The asynchronous twin of `PrecisClient`: the same methods, awaited."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=_core.headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def _send(self, call: Call[T]) -> T:
        attempt = 1
        while True:
            response = await self._http.send(call.request(self._http))
            delay = _core.retry_delay(self._retry, attempt, response, call.repeatable)
            if delay is None:
                return _core.outcome(call, response)
            await response.aclose()
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
        format: Format | None = None,
    ) -> Session:
        """Create a session (an id is generated when none is given); `SessionExists` if taken."""
        return await self._send(_core.create_session(session_id, metadata, settings, format))

    async def list_sessions(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> SessionPage:
        """One page of sessions, newest first; pass `next_cursor` back for the next."""
        return await self._send(_core.list_sessions(limit, cursor))

    async def get_session(self, session_id: str) -> Session:
        return await self._send(_core.get_session(session_id))

    async def update_session(
        self,
        session_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Session:
        """Replace the session's `metadata` and/or `settings` (the ones given)."""
        return await self._send(_core.update_session(session_id, metadata, settings))

    async def delete_session(self, session_id: str) -> None:
        """Delete the session with its messages and summaries."""
        await self._send(_core.delete_session(session_id))

    async def append_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> Appended:
        """Append 1..500 chat messages (OpenAI shape plus `metadata`, `client_id`); creates the
        session if missing."""
        return await self._send(_core.append_messages(session_id, messages))

    async def append_items(self, session_id: str, items: Sequence[ItemEntry]) -> Appended:
        """Append 1..500 Responses items, each as `{"item": ..., "client_id"?, "metadata"?}`;
        creates the session if missing."""
        return await self._send(_core.append_items(session_id, items))

    async def list_messages(
        self, session_id: str, *, after_seq: int | None = None, limit: int | None = None
    ) -> MessagePage:
        """Stored messages in order, summarized or not (removed ones never)."""
        return await self._send(_core.list_messages(session_id, after_seq, limit))

    async def remove_message(self, session_id: str, message_id: int) -> None:
        """Remove one message, with the rest of its tool-call exchange."""
        await self._send(_core.remove_message(session_id, message_id))

    async def pop_message(self, session_id: str) -> Popped:
        """Remove the newest message and answer it; `MessageNotFound` when none is left."""
        return await self._send(_core.pop_message(session_id))

    async def history(
        self,
        session_id: str,
        *,
        summary_limit: int | None = None,
        max_tokens: int | None = None,
        format: Format | None = None,
    ) -> History:
        """The summarized history; its `context` is ready to send to a model."""
        return await self._send(_core.history(session_id, summary_limit, max_tokens, format))

    async def compact(
        self,
        session_id: str,
        *,
        trigger: CompactTrigger | None = None,
        keep_last_n: int | None = None,
    ) -> Compacted:
        """Summarize now, inline; the new summary (None if nothing was due) and the history."""
        return await self._send(_core.compact(session_id, trigger, keep_last_n))

    async def list_summaries(
        self,
        session_id: str,
        *,
        include_superseded: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SummaryPage:
        """The session's summaries, newest first."""
        return await self._send(_core.list_summaries(session_id, include_superseded, limit, cursor))

    async def get_summary(self, summary_id: int) -> SummaryDetail:
        """One summary with the ids of its source messages."""
        return await self._send(_core.get_summary(summary_id))


class AsyncClientPerLoop:
    """An `AsyncPrecisClient` for the running event loop, made on first use in each loop.

    An httpx connection pool belongs to the loop that opened its connections, and apps run
    the same session object under several loops (each `asyncio.run`, each `Runner.run_sync`).
    """

    def __init__(self, make: Callable[[], AsyncPrecisClient]) -> None:
        self._make = make
        self._clients: dict[asyncio.AbstractEventLoop, AsyncPrecisClient] = {}

    def get(self) -> AsyncPrecisClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for ended in [other for other in self._clients if other.is_closed()]:
                del self._clients[ended]  # its connections went with its loop
            client = self._clients[loop] = self._make()
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
