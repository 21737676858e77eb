"""The sessions the operator tools' tests read, built once for `test_trace_summary` and
`test_verify`: one written through the store (`seed_session`: ten messages, two summaries and
their roll-up) and one through the HTTP API with removals (`removal_session`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from tests.helpers import (
    WAIT_SECONDS,
    append,
    append_batch,
    assistant,
    compact,
    tool_call,
    tool_result,
    user,
)

LONG_LINE = "word " * 200


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is my order 1234?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order": 1234}'},
            }
        ],
    },
    {"role": "tool", "content": '{"status": "shipped"}', "tool_call_id": "call_1"},
    {"role": "assistant", "content": "It shipped yesterday.\nTracking number: ZX-99."},
    {"role": "user", "content": "谢谢！什么时候到？"},
    {"role": "assistant", "content": "预计周五送达。"},
    {"role": "user", "content": LONG_LINE},
    {"role": "assistant", "content": "Yes, until it leaves the depot."},
    {"role": "user", "content": "Please do."},
    {"role": "assistant", "content": "Done."},
]
"""Ten messages: a tool call with its result, Chinese text, a multi-line and a very long one."""


FULL_METADATA: dict[str, Any] = {
    "algorithm": "bisect_v1",
    "trigger": "proactive",
    "trigger_reason": "message_limit",
    "chunk_count": 3,
    "max_depth": 1,
    "truncated": True,
    "compression_ratio": 0.25,
    "input_tokens": 400,
    "output_tokens": 100,
    "llm_calls": 3,
    "failed_llm_calls": 0,
    "duration_ms": 12,
}


@dataclass(frozen=True)
class Seeded:
    """A session of ten messages: summaries 1..4 and 5..8 rolled up into one (level 1)."""

    session_key: int
    external_id: str
    messages: list[store.MessageRow]
    first: store.SummaryRow
    second: store.SummaryRow
    rollup: store.SummaryRow


def new_message(spec: dict[str, Any]) -> store.NewMessage:
    return store.NewMessage(
        role=spec["role"],
        content=spec.get("content"),
        content_parts=None,
        name=None,
        tool_calls=spec.get("tool_calls"),
        tool_call_id=spec.get("tool_call_id"),
        metadata=None,
        client_id=None,
        token_count=5,
    )


def draft(
    first_seq: int,
    last_seq: int,
    metadata: dict[str, Any],
    level: int = 0,
    absorbs: tuple[int, ...] = (),
) -> store.SummaryDraft:
    return store.SummaryDraft(
        first_seq=first_seq,
        last_seq=last_seq,
        summary_text=f"Summary of seqs {first_seq}..{last_seq}.\nSecond line.",
        summary_prompt="prompt",
        model="local",
        temperature=0.3,
        target_summary_tokens=800,
        keep_last_n=2,
        approx_tokens=10,
        metadata=metadata,
        level=level,
        absorbs=absorbs,
    )


async def save(
    db: AsyncSession, session_key: int, summary_draft: store.SummaryDraft
) -> store.SummaryRow:
    summary = await store.save_summary(db, session_key, summary_draft)
    await db.commit()
    return summary


async def seed_session(
    db: AsyncSession, external_id: str = "chat-1", tenant: str = "default"
) -> Seeded:
    """Ten messages, two level-0 summaries (one with sparse metadata) and their roll-up."""
    outcome = await append_batch(
        db, tenant, external_id, [new_message(spec) for spec in CONVERSATION]
    )
    session_key = outcome.session.id
    first = await save(db, session_key, draft(1, 4, FULL_METADATA))
    second = await save(db, session_key, draft(5, 8, {"trigger": "manual"}))
    rollup_metadata = {**FULL_METADATA, "trigger_reason": "rollup", "truncated": False}
    rollup = await save(
        db, session_key, draft(1, 8, rollup_metadata, level=1, absorbs=(first.id, second.id))
    )
    return Seeded(session_key, external_id, outcome.messages, first, second, rollup)


REMOVALS = pytest.mark.parametrize(
    "settings_overrides", [{"summary_message_limit": 10_000}], indirect=True, ids=["local"]
)
"""The app of `client` with the built-in local model, whose background worker runs only the
re-making a removal asks for (no message limit is reached)."""


@dataclass(frozen=True)
class Removed:
    """A session built through the HTTP API: six messages summarized as 1..2 and 3..4 (merged
    into the node 1..4, level 1) and 5..6; then seq 3 removed, which erased 3..4 and the node
    above it, made 1..2 live again and left 5..6 live (a local erasure: a hole at 3..4); then
    3..4 made again by the background job (trigger_reason "erasure") and merged with 1..2 into
    a new node 1..4 (live); then a tool call and its result (seqs 7, 8) appended and popped one
    by one, linked to no summary. Summaries are the API's, by name; messages as appended, by
    seq."""

    external_id: str
    messages: dict[int, dict[str, Any]]
    first: dict[str, Any]
    second: dict[str, Any]
    rollup: dict[str, Any]
    third: dict[str, Any]
    remade: dict[str, Any]
    node: dict[str, Any]


async def every_summary(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true&limit=100")
    assert answer.status_code == 200, answer.text
    return list(answer.json()["summaries"])


SummaryKey = tuple[int, int, int, bool]

# the forest merged the first two leaves, then the remade one with the first again
REMOVAL_FOREST: frozenset[SummaryKey] = frozenset(
    {
        (1, 2, 0, False),
        (3, 4, 0, True),
        (1, 4, 1, True),
        (5, 6, 0, False),
        (3, 4, 0, False),
        (1, 4, 1, False),
    }
)


def by_range(summaries: list[dict[str, Any]]) -> dict[SummaryKey, dict[str, Any]]:
    return {
        (s["first_seq"], s["last_seq"], s["level"], s["erased_at"] is not None): s
        for s in summaries
    }


async def wait_for_forest(
    client: httpx.AsyncClient, sid: str, expected: frozenset[SummaryKey]
) -> dict[SummaryKey, dict[str, Any]]:
    """The session's summaries once the background job made the erased range again and the
    forest merged it: the remade leaf and the node above it may be seen one without the other
    for a moment."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while True:
        summaries = by_range(await every_summary(client, sid))
        if set(summaries) == expected or asyncio.get_running_loop().time() > deadline:
            assert set(summaries) == expected, f"{sid} within {WAIT_SECONDS} s"
            return summaries
        await asyncio.sleep(0.05)


async def removal_session(client: httpx.AsyncClient, sid: str) -> Removed:
    settings = {"summary_limit": 2, "keep_last_n": 0}
    created = await client.post("/v1/sessions", json={"id": sid, "settings": settings})
    assert created.status_code == 201, created.text
    messages: list[dict[str, Any]] = []
    for part in range(3):
        said = user(
            f"part {part} asks", name="alice", metadata={"part": part}, client_id=f"q{part}"
        )
        messages += (await append(client, sid, said, assistant(f"part {part} answers")))["messages"]
        await compact(client, sid, keep_last_n=0)
    removed = await client.delete(f"/v1/sessions/{sid}/messages/{messages[2]['id']}")
    assert removed.status_code == 204, removed.text
    await wait_for_forest(client, sid, REMOVAL_FOREST)
    messages += (await append(client, sid, tool_call("c1"), tool_result("c1")))["messages"]
    for _ in range(2):  # the result, then the call it left hidden
        popped = await client.post(f"/v1/sessions/{sid}/messages/pop")
        assert popped.status_code == 200, popped.text
    summaries = by_range(await every_summary(client, sid))
    assert set(summaries) == REMOVAL_FOREST
    return Removed(
        external_id=sid,
        messages={message["seq"]: message for message in messages},
        first=summaries[1, 2, 0, False],
        second=summaries[3, 4, 0, True],
        rollup=summaries[1, 4, 1, True],
        third=summaries[5, 6, 0, False],
        remade=summaries[3, 4, 0, False],
        node=summaries[1, 4, 1, False],
    )
