"""One tenant's large, adversarial messages do not stall the others.

Bob appends messages of a megabyte built to make backtracking patterns and token counting
slow, and the offline summarizer (the default model) summarizes them in the background; Alice's
requests meanwhile are answered as promptly as ever: the event loop is never held for long.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.helpers import user

ALICE = {"Authorization": "Bearer key_alice"}
BOB = {"Authorization": "Bearer key_bob"}

MAX_DELAY_SECONDS = 1.0
"""The longest Alice may wait for an answer while Bob's work runs: a pattern or a count
holding the event loop over a megabyte takes seconds to minutes (a quadratic pattern held it
13 s), while a machine as busy as CI, its two cores shared with Bob's summaries and the
database, may delay an answer by some hundreds of milliseconds without the loop being held."""

STALLS_ALLOWED = 1
"""Answers slower than MAX_DELAY_SECONDS allowed: a shared machine that stops the whole
process once for seconds (seen once on a CI machine, 4.5 s among 529 answers) is not the loop
held, which happens at every megabyte message Bob sends (seven) and every summary of them."""

LONGEST_STALL_SECONDS = 10.0
"""Even that one stall stays under this: a loop held by a pattern over a megabyte is held for
minutes to hours."""

MESSAGE_BYTES = 990_000
"""Just under MAX_MESSAGE_BYTES (1,000,000) once encoded as JSON."""

ADVERSARIAL = ("a-", "a_", "aA", "Tools used: a ×", "`a", "1.", "a")
"""Runs that backtracking patterns scan again from every position."""

BOB_MESSAGES = 2 * (len(ADVERSARIAL) // 2)
"""Bob appends them two at a time."""


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "api_keys": "alice:key_alice,bob:key_bob",
        "summary_message_limit": 2,
        "summary_keep_last_n": 0,
        "summary_max_context_tokens": 10_000_000,
        "summary_workers": 2,
    }


def huge(unit: str) -> str:
    return unit * (MESSAGE_BYTES // len(unit.encode()))


async def bob_summarized_to(client: httpx.AsyncClient) -> int:
    """The last seq Bob's live summaries cover (0: none)."""
    answer = await client.get("/v1/sessions/bob-big/summaries", headers=BOB)
    assert answer.status_code == 200, answer.text
    return max((summary["last_seq"] for summary in answer.json()["summaries"]), default=0)


async def test_a_tenants_megabyte_messages_do_not_delay_another_tenant(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.post(
        "/v1/sessions/alice-chat/messages", json={"messages": [user("hello")]}, headers=ALICE
    )
    assert answer.status_code == 201, answer.text
    delays: list[float] = []
    bob_done = asyncio.Event()

    async def alice() -> None:
        while not bob_done.is_set():
            started = time.perf_counter()
            answer = await client.get("/v1/sessions/alice-chat/history", headers=ALICE)
            delays.append(time.perf_counter() - started)
            assert answer.status_code == 200
            await asyncio.sleep(0.01)

    async def bob() -> None:
        try:
            for first, second in zip(ADVERSARIAL[::2], ADVERSARIAL[1::2], strict=False):
                # summary_keep_last_n 0 and message_limit 2: every batch is summarized
                batch = {"messages": [user(huge(first)), user(huge(second))]}
                answer = await client.post("/v1/sessions/bob-big/messages", json=batch, headers=BOB)
                assert answer.status_code == 201, answer.text
            for _ in range(1200):  # two minutes at most
                if await bob_summarized_to(client) == BOB_MESSAGES:
                    break
                await asyncio.sleep(0.1)
        finally:
            bob_done.set()

    await asyncio.gather(alice(), bob())
    assert await bob_summarized_to(client) == BOB_MESSAGES, "the offline summarizer ran"
    assert len(delays) > 20
    stalls = sorted(delay for delay in delays if delay > MAX_DELAY_SECONDS)
    assert len(stalls) <= STALLS_ALLOWED and max(delays) <= LONGEST_STALL_SECONDS, (
        f"Alice waited {stalls} s (of {len(delays)} requests) while Bob's work ran"
    )
