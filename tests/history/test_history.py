"""The history loader: latest summaries, later messages, tool-pair repair, the token budget.

Tests share the module's app and write summaries through `app_db`, each on its own session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession

from api.context import MISSING_TOOL_RESULT, TRUNCATION_MARKER
from api.db import driver
from summarizer.tokens import count_messages
from tests.conftest import QUIET
from tests.helpers import (
    append,
    assert_tool_pairs_valid,
    assistant,
    history,
    save_summaries,
    summary_draft,
    tool_call,
    tool_result,
    user,
)

SUMMARY_LIMIT = 3
"""The server-wide SUMMARY_LIMIT of this module's app."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {**QUIET, "summary_limit": SUMMARY_LIMIT}


def chat(count: int) -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages of about 20 tokens each."""
    return [
        (user if n % 2 == 0 else assistant)(f"message {n}: " + "lorem ipsum dolor " * 5)
        for n in range(count)
    ]


def ranges(summaries: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(s["first_seq"], s["last_seq"]) for s in summaries]


# --- summaries and the messages after them --------------------------------------------------


async def test_without_summaries_the_context_is_every_message(
    api: httpx.AsyncClient, sid: str
) -> None:
    messages = chat(4)
    await append(api, sid, *messages)
    body = await history(api, sid)
    assert body["summaries"] == []
    assert body["context"] == messages
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3, 4]


async def test_a_summary_limit_asked_for_shows_the_newest_and_names_the_rest_as_omitted(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(10))
    ids = await save_summaries(
        app_db,
        sid,
        summary_draft(1, 2),
        summary_draft(3, 4),
        summary_draft(5, 6),
        summary_draft(7, 8),
    )
    body = await history(api, sid, summary_limit=2)
    assert ranges(body["summaries"]) == [(5, 6), (7, 8)]
    assert body["omitted"]["summaries"] == ids[:2]


async def test_live_summaries_over_the_limit_all_load_until_their_roll_up_lands(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    """More live summaries than SUMMARY_LIMIT (a crash before the roll-up): none is dropped
    from the context unasked."""
    await append(api, sid, *chat(10))
    await save_summaries(
        app_db,
        sid,
        summary_draft(1, 2),
        summary_draft(3, 4),
        summary_draft(5, 6),
        summary_draft(7, 8),
    )
    body = await history(api, sid)
    assert ranges(body["summaries"]) == [(1, 2), (3, 4), (5, 6), (7, 8)]
    assert body["omitted"]["summaries"] == []
    shown = [m["content"] for m in body["context"] if m["role"] == "system"]
    assert [text.split("\n")[0] for text in shown] == [
        f"Summary of earlier conversation (messages {a}-{b}):" for a, b in ranges(body["summaries"])
    ]


async def test_a_lowered_session_summary_limit_leaves_no_live_summary_out(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(10))
    await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4))
    patched = await api.patch(f"/v1/sessions/{sid}", json={"settings": {"summary_limit": 1}})
    assert patched.status_code == 200
    body = await history(api, sid)
    assert ranges(body["summaries"]) == [(1, 2), (3, 4)]
    assert body["omitted"]["summaries"] == []


async def test_only_messages_after_the_newest_summary_are_loaded(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(10))
    await save_summaries(app_db, sid, summary_draft(1, 4), summary_draft(5, 8))
    assert [m["seq"] for m in (await history(api, sid))["messages"]] == [9, 10]


async def test_messages_under_summaries_beyond_the_limit_are_not_loaded(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(10))
    await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4), summary_draft(5, 6))
    body = await history(api, sid, summary_limit=1)
    assert ranges(body["summaries"]) == [(5, 6)]
    assert [m["seq"] for m in body["messages"]] == [7, 8, 9, 10]
    assert len(body["omitted"]["summaries"]) == 2


async def test_summaries_lead_the_context_as_system_messages(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    messages = chat(6)
    await append(api, sid, *messages)
    await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4))
    context = (await history(api, sid))["context"]
    assert [m["role"] for m in context[:2]] == ["system", "system"]
    assert "summary of 1-2" in context[0]["content"]
    assert "summary of 3-4" in context[1]["content"]
    assert context[2:] == messages[4:]


async def test_a_superseded_summary_is_not_returned(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(8))
    first, second = await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4))
    (rollup,) = await save_summaries(app_db, sid, summary_draft(1, 4, absorbs=(first, second)))
    (latest,) = await save_summaries(app_db, sid, summary_draft(5, 6))
    body = await history(api, sid)
    assert [s["id"] for s in body["summaries"]] == [rollup, latest]
    assert all("summary of 1-2" not in m["content"] for m in body["context"])


async def test_summaries_in_the_history_carry_their_range_and_level(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(6))
    first, second = await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4))
    await save_summaries(app_db, sid, summary_draft(1, 4, absorbs=(first, second)))
    (summary,) = (await history(api, sid))["summaries"]
    assert (summary["session_id"], summary["level"], summary["message_count"]) == (sid, 1, 4)
    assert (summary["first_seq"], summary["last_seq"], summary["superseded_by"]) == (1, 4, None)


async def test_summarized_messages_stay_in_the_raw_message_list(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(6))
    await save_summaries(app_db, sid, summary_draft(1, 4))
    raw = (await api.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert [m["seq"] for m in raw] == [1, 2, 3, 4, 5, 6]


async def test_history_of_an_unknown_session_answers_404(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions/nobody/history")
    assert answer.status_code == 404
    assert set(answer.json()) == {"error", "detail"}


# --- tool-pair repair -----------------------------------------------------------------------


async def test_a_tool_result_whose_call_is_summarized_is_dropped_from_the_context(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, user("q"), tool_call("c1"), tool_result("c1", "answer"), user("next"))
    await save_summaries(app_db, sid, summary_draft(1, 2))
    body = await history(api, sid)
    assert [m["seq"] for m in body["messages"]] == [3, 4]
    assert [m["role"] for m in body["context"]] == ["system", "user"]
    assert body["context"][-1]["content"] == "next"


async def test_a_call_without_results_gets_a_placeholder_result(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("q"), tool_call("c1"))
    context = (await history(api, sid))["context"]
    assert context[-1] == {"role": "tool", "tool_call_id": "c1", "content": MISSING_TOOL_RESULT}
    assert_tool_pairs_valid(context)


async def test_parallel_call_results_follow_their_call_in_call_order(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(
        api,
        sid,
        user("q"),
        tool_call("a", "b", "c"),
        tool_result("c"),
        tool_result("a"),
        tool_result("b"),
        user("n"),
    )
    context = (await history(api, sid))["context"]
    assert_tool_pairs_valid(context)
    assert [m.get("tool_call_id") for m in context] == [None, None, "a", "b", "c", None]


async def test_parallel_calls_with_one_missing_result_get_one_placeholder(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("q"), tool_call("a", "b"), tool_result("b", "real"), user("n"))
    context = (await history(api, sid))["context"]
    assert_tool_pairs_valid(context)
    assert [m["content"] for m in context if m["role"] == "tool"] == [MISSING_TOOL_RESULT, "real"]


# --- the max_tokens budget ------------------------------------------------------------------


async def test_max_tokens_keeps_the_context_within_the_budget(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(40))
    body = await history(api, sid, max_tokens=200)
    assert body["token_estimate"] <= 200
    assert count_messages(body["context"]) == body["token_estimate"]


async def test_max_tokens_keeps_the_newest_message(api: httpx.AsyncClient, sid: str) -> None:
    messages = chat(40)
    await append(api, sid, *messages)
    assert (await history(api, sid, max_tokens=200))["context"][-1] == messages[-1]


async def test_max_tokens_keeps_the_newest_message_even_when_it_alone_is_over(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(5), user("the newest " * 100))
    context = (await history(api, sid, max_tokens=10))["context"]
    assert context[-1]["content"] == "the newest " * 100


async def test_max_tokens_drops_the_oldest_behind_exactly_one_marker(
    api: httpx.AsyncClient, sid: str
) -> None:
    messages = chat(40)
    await append(api, sid, *messages)
    context = (await history(api, sid, max_tokens=200))["context"]
    assert [m["content"] for m in context].count(TRUNCATION_MARKER) == 1
    assert context[0] == {"role": "system", "content": TRUNCATION_MARKER}
    assert context[1:] == messages[len(messages) - len(context) + 1 :]


async def test_max_tokens_marks_the_truncation_even_when_only_the_newest_message_fits(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(5), user("the newest " * 100))
    context = (await history(api, sid, max_tokens=10))["context"]
    assert [m["content"] for m in context].count(TRUNCATION_MARKER) == 1


async def test_max_tokens_within_budget_changes_nothing(api: httpx.AsyncClient, sid: str) -> None:
    messages = chat(10)
    await append(api, sid, *messages)
    body = await history(api, sid, max_tokens=100_000)
    assert body["context"] == messages


async def test_max_tokens_keeps_summaries_ahead_of_the_marker(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *chat(40))
    await save_summaries(app_db, sid, summary_draft(1, 2))
    context = (await history(api, sid, max_tokens=200))["context"]
    assert "summary of 1-2" in context[0]["content"]
    assert context[1]["content"] == TRUNCATION_MARKER


async def test_max_tokens_never_splits_parallel_tool_results_from_their_call(
    api: httpx.AsyncClient, sid: str
) -> None:
    # A budget of 80 fits the last user message and the short result "b", never "a".
    await append(
        api,
        sid,
        *chat(4),
        tool_call("a", "b"),
        tool_result("a", "long result " * 60),
        tool_result("b", "short"),
        user("last"),
    )
    context = (await history(api, sid, max_tokens=80))["context"]
    assert_tool_pairs_valid(context)
    assert context[-1]["content"] == "last"
    assert all(m["role"] != "tool" for m in context)


async def test_max_tokens_keeps_a_tool_unit_whole_when_it_fits(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(20), tool_call("a"), tool_result("a", "the result"), user("last"))
    context = (await history(api, sid, max_tokens=120))["context"]
    assert_tool_pairs_valid(context)
    assert [m["role"] for m in context[-3:]] == ["assistant", "tool", "user"]
    assert context[-2]["content"] == "the result"


async def test_max_tokens_on_a_large_session_loads_only_a_tail(
    api: httpx.AsyncClient, sid: str
) -> None:
    messages = chat(2000)
    for start in range(0, 2000, 500):
        await append(api, sid, *messages[start : start + 500])
    body = await history(api, sid, max_tokens=300)
    assert len(body["messages"]) < 100
    assert body["messages"][-1]["seq"] == 2000
    assert body["token_estimate"] <= 300


async def test_format_openai_is_accepted_and_other_formats_get_422(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("hello"))
    ok = await api.get(f"/v1/sessions/{sid}/history", params={"format": "openai"})
    assert ok.status_code == 200
    assert ok.json()["context"] == [{"role": "user", "content": "hello"}]
    other = await api.get(f"/v1/sessions/{sid}/history", params={"format": "anthropic"})
    assert other.status_code == 422
    assert "format" in other.json()["detail"]


# --- round trips ----------------------------------------------------------------------------


@contextmanager
def statements(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL statements the app's request engine sends while the block runs: through
    SQLAlchemy, and on the driver itself (PostgreSQL's hot reads, `api.db.driver`)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    on_driver = driver.fetch

    async def fetch(engine: Any, statement: Any, params: Any, **kwargs: Any) -> list[Any]:
        sent.append(str(statement))
        return await on_driver(engine, statement, params, **kwargs)

    monkeypatch.setattr(driver, "fetch", fetch)
    target = app.state.engine.sync_engine
    event.listen(target, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(target, "before_cursor_execute", record)
        monkeypatch.undo()


@pytest.mark.parametrize("max_tokens", [None, 2000])
async def test_a_history_load_is_two_statements(
    api: httpx.AsyncClient,
    app: FastAPI,
    sid: str,
    app_db: AsyncSession,
    max_tokens: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session row with its pending-job flag, then the pinned prefix, the live summaries
    and a page of the tail in one statement."""
    await append(api, sid, {"role": "system", "content": "be brief"}, *chat(12))
    await save_summaries(app_db, sid, summary_draft(2, 5), summary_draft(6, 9))
    params = {} if max_tokens is None else {"max_tokens": max_tokens}
    with statements(app, monkeypatch) as sent:
        body = await history(api, sid, **params)
    assert len(sent) == 2, sent
    assert [m["seq"] for m in body["pinned"]] == [1]
    assert ranges(body["summaries"]) == [(2, 5), (6, 9)]
    assert [m["seq"] for m in body["messages"]] == [10, 11, 12, 13]
    assert body["truncated_messages"] == 0


async def test_a_budget_past_one_page_reads_the_pages_before_it(
    api: httpx.AsyncClient, app: FastAPI, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = chat(300)
    await append(api, sid, *messages)
    budget = count_messages(messages[-150:])
    with statements(app, monkeypatch) as sent:
        body = await history(api, sid, max_tokens=budget)
    loaded = [m["seq"] for m in body["messages"]]
    assert loaded == list(range(loaded[0], 301))
    assert 140 <= len(loaded) <= 151
    # one more page of the tail, as large as the rest of the budget wants at the sizes read
    assert len(sent) == 2 + 1


async def test_a_budget_of_thousands_of_messages_reads_them_in_a_few_pages(
    api: httpx.AsyncClient, app: FastAPI, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = chat(2500)
    for start in range(0, len(messages), 500):
        await append(api, sid, *messages[start : start + 500])
    with statements(app, monkeypatch) as sent:
        body = await history(api, sid, max_tokens=10**6)
    assert [m["seq"] for m in body["messages"]] == list(range(1, 2501))
    # the first page, then pages of at most MAX_TAIL_PAGE: 64 + 1024 + 1024 + 388
    assert len(sent) == 2 + 3


def test_the_openapi_document_keeps_the_hot_routes_response_schemas(app: FastAPI) -> None:
    """The history and append routes answer pre-serialized JSON; the document still says what."""
    paths = app.openapi()["paths"]
    loaded = paths["/v1/sessions/{session_id}/history"]["get"]["responses"]["200"]
    appended = paths["/v1/sessions/{session_id}/messages"]["post"]["responses"]["201"]
    assert loaded["content"]["application/json"]["schema"]["$ref"].endswith("/History")
    assert appended["content"]["application/json"]["schema"]["$ref"].endswith("/AppendResponse")
