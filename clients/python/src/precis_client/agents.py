"""`PrecisSession`: an OpenAI Agents SDK session kept by Precis (extra `agents`).

Items are stored verbatim in a `responses` session; `get_items` answers the summarized view,
so a long conversation reaches the model as its summaries plus the items after them.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "PrecisSession needs the Agents SDK: pip install 'precis-client[agents]'"
    ) from exc

from precis_client._core import DEFAULT_BASE_URL, DEFAULT_TIMEOUT_SECONDS, MAX_BATCH
from precis_client.client import AsyncClientPerLoop, AsyncPrecisClient
from precis_client.errors import MessageNotFound, SessionNotFound
from precis_client.types import ItemEntry

__all__ = ["PrecisSession"]


class PrecisSession:
    """An Agents SDK `Session` whose items live in a Precis session of the same id.

    `Runner.run(agent, input, session=PrecisSession("user-42", base_url=...))` is all it
    takes. `get_items` returns the summarized history (summaries as leading `developer`
    items), fitted to `max_tokens` when given. `session_settings` follows the SDK's own
    sessions (`SQLiteSession`): `SessionSettings()` by default, a dict normalized into
    `SessionSettings`, an unknown field a `TypeError`.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_tokens: int | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.max_tokens = max_tokens
        self._clients = AsyncClientPerLoop(
            lambda: AsyncPrecisClient(base_url, api_key=api_key, timeout=timeout)
        )

    def _client(self) -> AsyncPrecisClient:
        return self._clients.get()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The summarized history, oldest first; with `limit`, its newest `limit` items.

        This is the sendable view, what the Responses API takes as input: items it would
        refuse are left out (a `reasoning` item with no item after it, until that item is
        added; a tool output whose call is not before it), and a call without its output yet
        comes with a placeholder output. So it may hold fewer items than were added, and
        `pop_item()` may return one it never showed; the history's `omitted` names each.
        """
        limit = resolve_session_limit(limit, self.session_settings)
        if limit == 0:
            return []
        try:
            history = await self._client().history(
                self.session_id, max_tokens=self.max_tokens, format="responses"
            )
        except SessionNotFound:
            return []
        items = cast(list[TResponseInputItem], history["context"])
        return items[-limit:] if limit is not None and limit > 0 else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as they are; the first append creates the session.

        Each item gets a random `client_id`, so a retried append stores it once.
        """
        entries: list[ItemEntry] = [
            {"item": cast(dict[str, Any], item), "client_id": uuid.uuid4().hex} for item in items
        ]
        client = self._client()
        for start in range(0, len(entries), MAX_BATCH):
            await client.append_items(self.session_id, entries[start : start + MAX_BATCH])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it as added; None when the session holds none.

        Popping a tool output hides its call from `get_items()`; the call is the next pop, so
        the runner's rewind gets back each item it added, one by one.
        """
        try:
            popped = await self._client().pop_message(self.session_id)
        except (MessageNotFound, SessionNotFound):
            return None
        message = popped["message"]
        item = message["item"]
        if item is None:  # a chat session: its message in the Responses input shape
            item = {"role": message["role"], "content": message["content"]}
        return cast(TResponseInputItem, item)

    async def clear_session(self) -> None:
        """Delete the session, its items and summaries."""
        with contextlib.suppress(SessionNotFound):
            await self._client().delete_session(self.session_id)

    async def close(self) -> None:
        """Close the HTTP client of the running event loop."""
        await self._clients.aclose()
