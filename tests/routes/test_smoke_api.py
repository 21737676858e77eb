"""The first end-to-end path: append through HTTP and load the history back."""

from __future__ import annotations

import httpx


async def test_append_then_history_returns_messages_in_order(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/v1/sessions/chat-1/messages",
        json={
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ]
        },
    )
    assert answer.status_code == 201, answer.text
    assert [m["seq"] for m in answer.json()["messages"]] == [1, 2]
    history = (await client.get("/v1/sessions/chat-1/history")).json()
    assert [m["content"] for m in history["context"]] == ["hi", "hello"]
