"""`POST /v1/messages` through the official `anthropic` package: the session named by
`metadata.user_id` or the header, resent turns reconciled, tools, streams, `count_tokens`, the
key as `x-api-key`, errors in Anthropic's shape; the upstream model reached through litellm's
OpenAI path and its Anthropic path (docs/design.md, "Chat Completions and Anthropic
Messages")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from fastapi import FastAPI

from tests.support.fake_llm import FakeLLM, running_fake_llm

OPENAI_MODEL = "openai/fake"
ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5"
MODELS = (OPENAI_MODEL, ANTHROPIC_MODEL)
WINDOW = 3_000
OUTPUT_TOKENS = 200
SESSION_HEADER = "X-Precis-Session"

WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: FakeLLM) -> None:
    upstream.reset()
    upstream.mode = "marker_echo"


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return {
        "summary_workers": 0,
        "model_allowed": ",".join(MODELS),
        "model_api_base": upstream.base_url,
        "model_api_key": "sk-upstream",
        "model_context_tokens": ",".join(f"{model}={WINDOW}" for model in MODELS),
        "summary_model": "openai/fake",
        "summary_api_base": upstream.base_url,
        "summary_api_key": "summarizer-key",
        "summary_model_context_tokens": WINDOW,
        "summary_keep_last_n": 2,
        "summary_message_limit": 10_000,
        "summary_max_context_tokens": 1_000_000,
    }


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[anthropic.AsyncAnthropic]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield anthropic.AsyncAnthropic(
            base_url="http://localhost", api_key="dev", http_client=http, max_retries=0
        )


async def stored(api: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/sessions/{session}/messages", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]  # type: ignore[no-any-return]


def text(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


@pytest.mark.parametrize("model", MODELS)
async def test_a_resending_client_is_remembered_once(
    client: anthropic.AsyncAnthropic,
    api: httpx.AsyncClient,
    upstream: FakeLLM,
    sid: str,
    model: str,
) -> None:
    turns: list[Any] = [{"role": "user", "content": "MARKER-one hello"}]
    first = await client.messages.create(
        model=model,
        max_tokens=OUTPUT_TOKENS,
        system="MARKER-rules be brief",
        messages=turns,
        metadata={"user_id": sid},
    )
    assert first.stop_reason == "end_turn"
    assert text(first) == "MARKER-rules\nMARKER-one"
    turns.append({"role": "assistant", "content": first.content})
    turns.append({"role": "user", "content": [{"type": "text", "text": "MARKER-two next"}]})
    second = await client.messages.create(
        model=model,
        max_tokens=OUTPUT_TOKENS,
        system="MARKER-rules be brief",
        messages=turns,
        metadata={"user_id": sid},
    )
    assert text(second) == "MARKER-rules\nMARKER-one\nMARKER-two"
    kept = await stored(api, sid)
    assert [message["role"] for message in kept] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    if model == ANTHROPIC_MODEL:
        assert upstream.calls[-1].path.endswith("/messages")


async def test_another_conversation_of_a_user_is_kept_apart_not_branched(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, sid: str
) -> None:
    """Claude Code names its session in `metadata.user_id` and, between two turns, asks for a
    title of the conversation with the same `user_id` and a system prompt of its own: the
    title calls share no message with the conversation, so each goes to a session of its own,
    and the conversation goes on in its session, whole and unbranched."""

    async def said(system: str, turns: list[Any]) -> anthropic.types.Message:
        raw = await client.messages.with_raw_response.create(
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            system=system,
            messages=turns,
            metadata={"user_id": sid},
        )
        sessions.append(raw.headers["x-precis-session"])
        assert "x-precis-branched-from" not in raw.headers
        return await raw.parse()

    sessions: list[str] = []
    turns: list[Any] = [{"role": "user", "content": "MARKER-one hello"}]
    titled = "Write a title for this conversation."
    await said(titled, [{"role": "user", "content": "MARKER-one hello"}])
    first = await said("MARKER-rules be brief", turns)
    turns += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "MARKER-two next"},
    ]
    await said(titled, [{"role": "user", "content": "MARKER-two next"}])
    second = await said("MARKER-rules be brief", turns)

    assert text(second) == "MARKER-rules\nMARKER-one\nMARKER-two"
    title_one, conversation, title_two, again = sessions
    assert title_one == sid and conversation == again
    assert len({title_one, conversation, title_two}) == 3
    kept = await stored(api, conversation)
    assert [message["role"] for message in kept] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert [message["role"] for message in await stored(api, sid)] == [
        "system",
        "user",
        "assistant",
    ]
    listed = await api.get("/v1/sessions", params={"limit": 1000})
    assert not [s for s in listed.json()["sessions"] if s["id"].startswith(f"{sid}:branch")]


async def test_two_first_turns_racing_for_a_new_name_are_kept_apart(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, sid: str
) -> None:
    """Claude Code's first prompt and its title call arrive together, both before the name
    holds anything: the one stored second goes to a session of its own, nothing branches."""

    async def said(system: str, text_said: str) -> Any:
        raw = await client.messages.with_raw_response.create(
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            system=system,
            messages=[{"role": "user", "content": text_said}],
            metadata={"user_id": sid},
        )
        return raw.headers

    answers = await asyncio.gather(
        said("Write a title for this conversation.", "MARKER-one hello"),
        said("MARKER-rules be brief", "MARKER-one hello"),
    )
    assert all("x-precis-branched-from" not in headers for headers in answers)
    named = {headers["x-precis-session"] for headers in answers}
    assert sid in named and len(named) == 2
    for session in named:
        kept = await stored(api, session)
        assert [message["role"] for message in kept] == ["system", "user", "assistant"]
    listed = await api.get("/v1/sessions", params={"limit": 1000})
    assert not [s for s in listed.json()["sessions"] if s["id"].startswith(f"{sid}:branch")]


async def test_a_first_turn_racing_its_own_retry_is_not_moved_apart(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    """The same first turn twice at once (a retry), a model answering each differently: the
    later one branches the session as any racing retry does, and no session of its own is
    made for it."""
    answered = iter(range(100))
    upstream.responder = lambda messages: f"answer {next(answered)}"

    async def said() -> Any:
        raw = await client.messages.with_raw_response.create(
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            system="MARKER-rules be brief",
            messages=[{"role": "user", "content": "MARKER-one hello"}],
            metadata={"user_id": sid},
        )
        return raw.headers

    async def session_ids() -> set[str]:
        listed = await api.get("/v1/sessions", params={"limit": 1000})
        return {session["id"] for session in listed.json()["sessions"]}

    before = await session_ids()
    answers = await asyncio.gather(said(), said())
    assert {headers["x-precis-session"] for headers in answers} == {sid}
    assert [("x-precis-branched-from" in headers) for headers in answers].count(True) == 1
    [branch] = await session_ids() - before - {sid}
    assert branch.startswith(f"{sid}:branch-")


async def test_another_conversation_is_known_by_its_start_whatever_the_marks_on_it(
    api: httpx.AsyncClient, sid: str
) -> None:
    """On the Chat Completions wire a client may move its cache mark from turn to turn: the
    conversation's start, as a resend is matched, still names the same session."""

    async def said(messages: list[Any]) -> str:
        answer = await api.post(
            "/v1/chat/completions",
            json={
                "model": OPENAI_MODEL,
                "max_tokens": OUTPUT_TOKENS,
                "messages": messages,
                "metadata": {"session_id": sid},
            },
        )
        assert answer.status_code == 200, answer.text
        assert "x-precis-branched-from" not in answer.headers
        return answer.headers["x-precis-session"]

    mark = {"type": "ephemeral"}
    assert await said([{"role": "user", "content": "MARKER-other conversation"}]) == sid
    system = {"role": "system", "content": [{"type": "text", "text": "MARKER-rules"}]}
    first = {
        "role": "user",
        "content": [{"type": "text", "text": "MARKER-one", "cache_control": mark}],
    }
    moved = await said([system, first])
    first_unmarked = {"role": "user", "content": "MARKER-one"}
    answered = {"role": "assistant", "content": "MARKER-rules\nMARKER-one"}
    next_turn = {
        "role": "user",
        "content": [{"type": "text", "text": "MARKER-two", "cache_control": mark}],
    }
    again = await said([{**system, "content": "MARKER-rules"}, first_unmarked, answered, next_turn])
    assert moved == again != sid
    assert [m["role"] for m in await stored(api, moved)] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_streamed_answer_is_stored_when_it_ends(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    async with client.messages.stream(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=[{"role": "user", "content": "MARKER-streamed hi"}],
        extra_headers={SESSION_HEADER: sid},
    ) as stream:
        final = await stream.get_final_message()
    assert text(final) == "MARKER-streamed"
    kept = await stored(api, sid)
    assert [(m["role"], m["content"]) for m in kept] == [
        ("user", "MARKER-streamed hi"),
        ("assistant", "MARKER-streamed"),
    ]


async def test_tool_use_and_results_round_trip(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    upstream.call_tool_next("get_weather", '{"city": "Paris"}')
    turns: list[Any] = [{"role": "user", "content": "MARKER-weather in Paris?"}]
    asked = await client.messages.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
    )
    assert asked.stop_reason == "tool_use"
    [use] = [block for block in asked.content if block.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    turns.append({"role": "assistant", "content": asked.content})
    turns.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "MARKER-sunny"}],
        }
    )
    answered = await client.messages.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
    )
    assert "MARKER-sunny" in text(answered)
    kept = await stored(api, sid)
    assert [message["role"] for message in kept] == ["user", "assistant", "tool", "assistant"]


async def test_count_tokens_counts_the_request(client: anthropic.AsyncAnthropic) -> None:
    short = await client.messages.count_tokens(
        model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    longer = await client.messages.count_tokens(
        model=OPENAI_MODEL,
        system="You are terse. " * 20,
        messages=[{"role": "user", "content": "hi " * 100}],
        tools=[WEATHER_TOOL],
    )
    assert 0 < short.input_tokens < longer.input_tokens


async def test_errors_answer_in_anthropic_shape_and_store_nothing(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model="openai/not-allowed",
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={SESSION_HEADER: sid},
        )
    assert refused.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "model 'openai/not-allowed' is not allowed on this server "
            "(MODEL_ALLOWED); in development mode 'precis/offline' answers without a provider",
        },
    }

    async def ask(message: Any, **extra: Any) -> None:
        await client.messages.create(
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[message],
            extra_headers={SESSION_HEADER: sid},
            **extra,
        )

    with pytest.raises(anthropic.BadRequestError) as unknown_block:
        await ask({"role": "user", "content": [{"type": "document", "source": {}}]})
    assert "document" in str(unknown_block.value)
    with pytest.raises(anthropic.BadRequestError) as not_a_flag:
        await ask({"role": "user", "content": "hi"}, extra_body={"stream": "yes"})
    assert "stream" in str(not_a_flag.value)
    upstream.fail_next(503)
    with pytest.raises(anthropic.APIStatusError) as failed:
        await ask({"role": "user", "content": "MARKER-lost"})
    assert failed.value.status_code == 502
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_a_wrong_key_is_refused_in_anthropic_shape(app: FastAPI) -> None:
    app.state.tenant_keys = {"right-key": "tenant-a"}
    try:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
            wrong = anthropic.AsyncAnthropic(
                base_url="http://localhost", api_key="wrong", http_client=http, max_retries=0
            )
            with pytest.raises(anthropic.AuthenticationError) as refused:
                await wrong.messages.count_tokens(
                    model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
                )
            assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
            right = anthropic.AsyncAnthropic(
                base_url="http://localhost", api_key="right-key", http_client=http, max_retries=0
            )
            counted = await right.messages.count_tokens(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": "hi"}]
            )
            assert counted.input_tokens > 0
            # Anthropic's own header for the key, as other Anthropic clients send it
            by_header = await http.post(
                "/v1/messages/count_tokens",
                headers={"x-api-key": "right-key"},
                json={"model": OPENAI_MODEL, "messages": [{"role": "user", "content": "hi"}]},
            )
            assert by_header.status_code == 200, by_header.text
            assert by_header.json()["input_tokens"] == counted.input_tokens
    finally:
        app.state.tenant_keys = {}


def cache_marks(request: Any) -> int:
    """How many blocks of a request (tools, system, messages) carry `cache_control`."""
    return json.dumps(request).count('"cache_control"')


async def test_an_anthropic_request_caches_its_system_prompt_and_its_end(
    client: anthropic.AsyncAnthropic, upstream: FakeLLM, sid: str
) -> None:
    """Claude Code's way: a long system prompt and tools, a tool used, its result sent back.
    Each request marks the system prompt's end and its own last block; the client's own marks
    are not sent on."""
    upstream.call_tool_next("get_weather", json.dumps({"city": "Paris"}))
    system: Any = [
        {"type": "text", "text": "MARKER-rules You are terse."},
        {"type": "text", "text": "Answer in English.", "cache_control": {"type": "ephemeral"}},
    ]
    turns: list[Any] = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "MARKER-paris weather?",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    ]
    first = await client.messages.create(
        model=ANTHROPIC_MODEL,
        max_tokens=OUTPUT_TOKENS,
        system=system,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
    )
    sent = upstream.calls[-1].request
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert cache_marks(sent) == 2
    [use] = [block for block in first.content if block.type == "tool_use"]
    turns += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "MARKER-sun"}],
        },
    ]
    await client.messages.create(
        model=ANTHROPIC_MODEL,
        max_tokens=OUTPUT_TOKENS,
        system=system,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
    )
    sent = upstream.calls[-1].request
    [last] = sent["messages"][-1]["content"]
    assert last["type"] == "tool_result" and last["cache_control"] == {"type": "ephemeral"}
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert cache_marks(sent) == 2
    # the answer's own tool call, as stored and sent back, carries no mark
    assert '"cache_control"' not in json.dumps(sent["messages"][:-1])


async def test_a_chat_completion_for_anthropic_caches_a_developer_prompt_not_the_tools_marks(
    api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    """On the Chat Completions wire the tools come as the client sent them: their own marks
    are left out, so Precis's three stay within Anthropic's four; a `developer` prompt is the
    system prompt its mark ends."""
    mark = {"type": "ephemeral"}
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER_TOOL["input_schema"]},
            "cache_control": mark,
        },
        {
            "type": "function",
            "function": {"name": "get_time", "parameters": {"type": "object"}},
            "cache_control": mark,
        },
    ]
    answer = await api.post(
        "/v1/chat/completions",
        headers={SESSION_HEADER: sid},
        json={
            "model": ANTHROPIC_MODEL,
            "max_tokens": OUTPUT_TOKENS,
            "messages": [
                {"role": "developer", "content": "MARKER-rules be brief"},
                {"role": "user", "content": "MARKER-ask what time is it"},
            ],
            "tools": tools,
        },
    )
    assert answer.status_code == 200, answer.text
    sent = upstream.calls[-1].request
    assert sent["system"][-1]["cache_control"] == mark
    assert sent["messages"][-1]["content"][-1]["cache_control"] == mark
    assert cache_marks(sent) == 2
    assert '"cache_control"' not in json.dumps(sent["tools"])


async def test_the_newest_summary_is_a_prompt_cache_breakpoint_for_anthropic(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    turns = [{"role": "user", "content": f"MARKER-early{number} question"} for number in range(3)]
    history = []
    for turn in turns:
        history.extend([turn, {"role": "assistant", "content": "noted"}])
    appended = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": history})
    assert appended.status_code == 201, appended.text
    compacted = await api.post(f"/v1/sessions/{sid}/compact", json={"keep_last_n": 0})
    assert compacted.json()["summary"] is not None, compacted.text
    answer = await client.messages.create(
        model=ANTHROPIC_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=[{"role": "user", "content": "MARKER-now what did I ask"}],
        extra_headers={SESSION_HEADER: sid},
    )
    assert "MARKER-early2" in text(answer)
    sent = upstream.calls[-1].request
    marked = [
        block
        for block in sent.get("system") or []
        if isinstance(block, dict) and block.get("cache_control")
    ]
    assert len(marked) == 1 and "Summary of earlier conversation" in marked[0]["text"]
    assert cache_marks(sent) == 2  # the summary, and the request's end
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # an OpenAI model gets the summary as plain text
    await client.messages.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=[{"role": "user", "content": "MARKER-again"}],
        extra_headers={SESSION_HEADER: sid},
    )
    assert "cache_control" not in str(upstream.calls[-1].request)


async def test_context_management_clears_old_tool_results_and_reports_it(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    big = "MARKER-result-{} " + "lines of a long tool result " * 60
    turns: list[Any] = []
    for number in range(4):
        turns.append({"role": "user", "content": f"MARKER-ask{number} read the file"})
        use = {"type": "tool_use", "id": f"toolu_{number}", "name": "get_weather", "input": {}}
        turns.append({"role": "assistant", "content": [use]})
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{number}",
            "content": big.format(number),
        }
        turns.append({"role": "user", "content": [result]})
    management = {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 100},
                "keep": {"type": "tool_uses", "value": 1},
            }
        ]
    }
    first = await client.messages.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
    )
    assert "MARKER-result-0" in str(upstream.calls[-1].messages)  # new messages go as sent
    turns.append({"role": "assistant", "content": first.content})
    turns.append({"role": "user", "content": "MARKER-next what now"})
    raw = await client.messages.with_raw_response.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=turns,
        tools=[WEATHER_TOOL],
        extra_headers={SESSION_HEADER: sid},
        extra_body={"context_management": management},
    )
    body = raw.http_response.json()
    [applied] = body["context_management"]["applied_edits"]
    assert applied["type"] == "clear_tool_uses_20250919"
    assert applied["cleared_tool_uses"] >= 1 and applied["cleared_input_tokens"] > 0
    results = [str(m["content"]) for m in upstream.calls[-1].messages if m["role"] == "tool"]
    assert len(results) == 4
    assert "MARKER-result-3" in results[3]  # the newest result is kept
    assert "MARKER-result-0" not in results[0]  # an older one was cleared
    # the stored session keeps every result as sent
    kept = await stored(api, sid)
    stored_results = [str(m["content"]) for m in kept if m["role"] == "tool"]
    assert len(stored_results) == 4 and "MARKER-result-0" in stored_results[0]


async def test_the_beta_marker_of_anthropics_clients_is_accepted(api: httpx.AsyncClient) -> None:
    body = {"model": OPENAI_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    counted = await api.post("/v1/messages/count_tokens?beta=true", json=body)
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > 0


async def test_a_clear_thinking_edit_is_accepted_and_any_other_edit_refused(
    client: anthropic.AsyncAnthropic, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    """Claude Code sends `clear_thinking_20251015` with every request: Precis sends the model
    no thinking blocks, so the edit has nothing to clear; an edit Precis cannot apply is a 400
    naming the ones it can, and nothing of that turn is stored."""
    upstream.mode = "marker_echo"
    thinking = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    turns: list[Any] = [{"role": "user", "content": "MARKER-thought hello"}]
    answer = await client.messages.create(
        model=OPENAI_MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=turns,
        extra_headers={SESSION_HEADER: sid},
        extra_body={"context_management": thinking},
    )
    assert [block.type for block in answer.content] == ["text"]
    assert "MARKER-thought" in str(answer.content)
    turns += [
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": "MARKER-refused again"},
    ]
    unknown = {"edits": [{"type": "clear_everything_20990101"}]}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=turns,
            extra_headers={SESSION_HEADER: sid},
            extra_body={"context_management": unknown},
        )
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert "edits[0]" in message and "clear_tool_uses_" in message
    assert "clear_thinking_" in message
    assert [m["role"] for m in await stored(api, sid)] == ["user", "assistant"]
