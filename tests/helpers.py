"""Message builders and HTTP steps shared by the summarization and fault tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from api import store
from api.append import AppendOutcome, store_batch
from api.db.engine import create_sessionmaker
from api.db.transactions import Database
from api.settings import Settings
from tests.support.fake_llm import FakeLLM

WAIT_SECONDS = 30.0
"""Longest wait for background summarization before a test fails."""


async def append_batch(
    db: AsyncSession, tenant: str, external_id: str, batch: Sequence[store.NewMessage]
) -> AppendOutcome:
    """`batch` stored by the service's append (what the route calls) on `db`'s database,
    summarization off; it commits on its own, so `db` must hold no write of its own."""
    engine = db.bind
    assert isinstance(engine, AsyncEngine)
    sessionmaker = create_sessionmaker(engine)
    url = engine.url.render_as_string(hide_password=False)
    settings = Settings(_env_file=None, database_url=url, dynamic_summary_enabled=False)
    outcome, _reason = await store_batch(
        Database(sessionmaker, sessionmaker, None), settings, tenant, external_id, batch
    )
    return outcome


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_call(call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    }


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"result of {call_id}"}


async def append(client: httpx.AsyncClient, session: str, *messages: dict[str, Any]) -> Any:
    answer = await client.post(f"/v1/sessions/{session}/messages", json={"messages": messages})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def wait_for_summary(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    """Poll the history until a summary is loaded and no work is pending."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        history = (await client.get(f"/v1/sessions/{session}/history")).json()
        if history["summaries"] and not history["summarization_pending"]:
            return dict(history)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no summary for {session} within {WAIT_SECONDS} s")


def summary_draft(
    first_seq: int, last_seq: int, absorbs: tuple[int, ...] = ()
) -> store.SummaryDraft:
    """A summary of `first_seq..last_seq` to write through the store; a roll-up with `absorbs`."""
    return store.SummaryDraft(
        first_seq=first_seq,
        last_seq=last_seq,
        summary_text=f"summary of {first_seq}-{last_seq}",
        summary_prompt="summarize",
        model="test",
        temperature=0.0,
        target_summary_tokens=100,
        keep_last_n=0,
        approx_tokens=8,
        metadata={"algorithm": "test"},
        level=1 if absorbs else 0,
        absorbs=absorbs,
    )


class Gate:
    """Holds the fake LLM's answers to prompts carrying `marker` until released.

    With `first_only`, only the first such prompt is held: a later summarization of the same
    messages (say, a compact that failed to wait) answers at once.
    """

    def __init__(self, marker: str, first_only: bool = False) -> None:
        self.marker = marker
        self.first_only = first_only
        self.entered = threading.Event()
        self.release = threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def hold(self, prompt: str) -> None:
        with self._lock:
            if self.marker not in prompt or (self.first_only and self._taken):
                return
            self._taken = True
        self.entered.set()
        self.release.wait(WAIT_SECONDS)


@contextmanager
def gated(fake_llm: FakeLLM, *gates: Gate) -> Iterator[None]:
    """The fake LLM answers a short summary, once every gate holding the prompt lets it go;
    every gate is released on exit, so no server thread is left waiting."""

    def responder(messages: list[dict[str, Any]]) -> str:
        prompt = " ".join(str(message.get("content")) for message in messages)
        for gate in gates:
            gate.hold(prompt)
        return "A short summary of the conversation."

    fake_llm.responder = responder
    try:
        yield
    finally:
        for gate in gates:
            gate.release.set()


async def wait_until(event: threading.Event) -> None:
    """Wait (bounded) for a gate's event, set by the fake LLM's server thread."""
    assert await asyncio.to_thread(event.wait, WAIT_SECONDS), "the fake LLM was never called"
