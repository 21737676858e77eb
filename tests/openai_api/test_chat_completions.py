"""`POST /v1/chat/completions` through the official `openai` package: the session ladder,
resent histories reconciled (new tail appended, divergence branched, stateful clients served),
the context fitted to the model's window, turns stored once, streams relayed, errors in
OpenAI's shape (docs/design.md, "Chat Completions and Anthropic Messages")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from summarizer.tokens import count_messages
from tests.support.fake_llm import (
    CHAT_PATH,
    MARKER_PATTERN,
    Call,
    FakeLLM,
    running_fake_llm,
)

MODEL = "openai/fake"
WINDOW = 3_000
OUTPUT_TOKENS = 200
SESSION_HEADER = "X-Precis-Session"

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
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
        "model_allowed": MODEL,
        "model_api_base": upstream.base_url,
        "model_api_key": "sk-upstream",
        "model_context_tokens": f"{MODEL}={WINDOW}",
        "summary_model": "openai/fake",
        "summary_api_base": upstream.base_url,
        "summary_api_key": "summarizer-key",
        "summary_model_context_tokens": WINDOW,
        "summary_keep_last_n": 2,
        "summary_message_limit": 10_000,
        "summary_max_context_tokens": 1_000_000,
        "memory_identify": "prefix",
    }


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


async def stored(api: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/sessions/{session}/messages", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return [
        {key: message[key] for key in ("role", "content") if message.get(key) is not None}
        for message in answer.json()["messages"]
    ]


def model_calls(fake: FakeLLM) -> list[Call]:
    """The turns' calls (the summarizer's prompts carry its transcript tag)."""
    return [
        call
        for call in fake.calls
        if call.path == CHAT_PATH and "<transcript" not in str(call.messages)
    ]


async def chat(
    client: AsyncOpenAI, session: str | None, messages: list[dict[str, Any]], **extra: Any
) -> Any:
    headers = {SESSION_HEADER: session} if session else {}
    return await client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=OUTPUT_TOKENS,
        extra_headers=headers,
        **extra,
    )


async def raw_chat(client: AsyncOpenAI, session: str | None, messages: list[dict[str, Any]]) -> Any:
    """`chat`, answered with its headers (`x-precis-session`, `x-precis-branched-from`)."""
    headers = {SESSION_HEADER: session} if session else {}
    return await client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=OUTPUT_TOKENS,
        extra_headers=headers,
    )


async def test_a_resending_client_stores_each_message_once(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "MARKER-rules be brief"},
        {"role": "user", "content": "MARKER-one hello"},
    ]
    for turn in ("MARKER-two", "MARKER-three"):
        answer = await chat(client, sid, history)
        history.append(answer.choices[0].message.model_dump())  # as SDK users resend it
        history.append({"role": "user", "content": f"{turn} next"})
    final = await chat(client, sid, history)
    assert final.choices[0].message.content is not None
    kept = await stored(api, sid)
    assert [message["role"] for message in kept] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert kept[-2]["content"] == "MARKER-three next"
    # the model got the stored context and the new message, each once
    sent = model_calls(upstream)[-1].messages
    assert [message["content"] for message in sent if message["role"] == "user"] == [
        "MARKER-one hello",
        "MARKER-two next",
        "MARKER-three next",
    ]


async def test_a_stateful_client_sends_only_its_new_messages(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    await chat(client, sid, [{"role": "user", "content": "MARKER-first remember me"}])
    answer = await chat(client, sid, [{"role": "user", "content": "MARKER-second what did I say"}])
    assert answer.choices[0].message.content == "MARKER-first\nMARKER-second"
    kept = await stored(api, sid)
    assert [message["role"] for message in kept] == ["user", "assistant", "user", "assistant"]


async def test_a_regenerated_answer_branches_the_session(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "MARKER-q1 question"}]
    first = await chat(client, sid, history)
    history.append(first.choices[0].message.model_dump())
    history.append({"role": "user", "content": "MARKER-q2 follow-up"})
    await chat(client, sid, history)
    # the client regenerates the last answer: the same history, resent
    raw = await raw_chat(client, sid, history)
    earlier = raw.headers["x-precis-branched-from"]
    assert earlier.startswith(f"{sid}:branch-")
    assert [m["role"] for m in await stored(api, sid)] == ["user", "assistant", "user", "assistant"]
    assert [m["role"] for m in await stored(api, earlier)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    session = (await api.get(f"/v1/sessions/{sid}")).json()
    assert session["forked_from"] == earlier and session["fork_seq"] == 3
    # an edited first question branches from the start
    edited = [{"role": "user", "content": "MARKER-q1 question, edited"}, *history[1:]]
    raw = await raw_chat(client, sid, edited)
    assert raw.headers["x-precis-branched-from"] != earlier
    assert len(await stored(api, sid)) == len(edited) + 1


async def test_a_streamed_turn_is_stored_when_it_completes(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "MARKER-streamed hello"}],
        max_tokens=OUTPUT_TOKENS,
        stream=True,
        extra_headers={SESSION_HEADER: sid},
    )
    text = "".join(
        [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    )
    assert text == "MARKER-streamed"
    kept = await stored(api, sid)
    assert kept == [
        {"role": "user", "content": "MARKER-streamed hello"},
        {"role": "assistant", "content": "MARKER-streamed"},
    ]


async def test_tool_calls_and_results_round_trip(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    upstream.call_tool_next("get_weather", '{"city": "Paris"}')
    history: list[dict[str, Any]] = [{"role": "user", "content": "MARKER-weather in Paris?"}]
    asked = await chat(client, sid, history, tools=[WEATHER_TOOL])
    calls = asked.choices[0].message.tool_calls
    assert calls is not None
    call = calls[0]
    assert asked.choices[0].finish_reason == "tool_calls"
    history.append(asked.choices[0].message.model_dump())
    history.append({"role": "tool", "tool_call_id": call.id, "content": "MARKER-sunny 21C"})
    answered = await chat(client, sid, history, tools=[WEATHER_TOOL])
    assert "MARKER-sunny" in (answered.choices[0].message.content or "")
    roles = [message["role"] for message in await stored(api, sid)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_without_a_session_the_call_is_passed_through(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, app: FastAPI
) -> None:
    app.state.settings.memory_identify = "named"
    try:
        answer = await chat(client, None, [{"role": "user", "content": "MARKER-nobody"}])
    finally:
        app.state.settings.memory_identify = "prefix"
    assert answer.choices[0].message.content == "MARKER-nobody"
    assert "x-precis-session" not in str(answer)


async def test_the_prefix_fingerprint_finds_the_session(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "MARKER-fp-start unique"}]
    raw = await raw_chat(client, None, history)
    session = raw.headers["x-precis-session"]
    assert session.startswith("prefix-")
    history.append(raw.parse().choices[0].message.model_dump())
    history.append({"role": "user", "content": "MARKER-fp-next"})
    again = await raw_chat(client, None, history)
    assert again.headers["x-precis-session"] == session
    assert len(await stored(api, session)) == 4


async def test_metadata_names_the_session(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "MARKER-meta"}],
        max_tokens=OUTPUT_TOKENS,
        metadata={"session_id": sid, "kept": "yes"},
    )
    assert len(await stored(api, sid)) == 2
    assert model_calls(upstream)[-1].request.get("metadata") == {"kept": "yes"}


async def test_errors_answer_in_openai_shape_and_store_nothing(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="openai/not-allowed",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={SESSION_HEADER: sid},
        )
    assert refused.value.code == "model_not_allowed"
    with pytest.raises(openai.BadRequestError) as malformed:
        await chat(client, sid, [{"role": "tool", "content": "no call id"}])
    assert "messages[0]" in str(malformed.value.param)
    assert malformed.value.code == "validation_failed"
    with pytest.raises(openai.BadRequestError) as not_a_flag:
        await chat(client, sid, [{"role": "user", "content": "hi"}], extra_body={"stream": "yes"})
    assert not_a_flag.value.param == "stream"
    upstream.fail_next(503)
    with pytest.raises(openai.APIStatusError) as failed:
        await chat(client, sid, [{"role": "user", "content": "MARKER-lost"}])
    assert failed.value.status_code == 502
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_a_model_counting_more_tokens_is_learned_and_never_refuses_again(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str, app: FastAPI
) -> None:
    upstream.token_ratio = 1.5
    upstream.context_window = WINDOW
    filler = " ".join(["words of a long conversation"] * 30)
    history: list[dict[str, Any]] = []
    refused_at: list[int] = []
    for number in range(24):
        history.append({"role": "user", "content": f"MARKER-turn{number} {filler}"})
        try:
            answer = await chat(client, sid, history)
        except openai.BadRequestError:
            refused_at.append(number)
            history.pop()
            continue
        history.append({"role": "assistant", "content": answer.choices[0].message.content})
    assert not [number for number in refused_at if number >= 3], refused_at
    turns = model_calls(upstream)
    over = [call.prompt_tokens + (call.max_tokens or 0) for call in turns[3:]]
    assert max(over) <= WINDOW
    ratio = await app.state.token_ratios.ratio(MODEL)
    assert 1.45 < ratio < 1.6


async def test_a_streamed_turn_is_stored_before_the_client_hears_it_end(
    client: AsyncOpenAI, api: httpx.AsyncClient, sid: str
) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "MARKER-leaving early"}],
        max_tokens=OUTPUT_TOKENS,
        stream=True,
        extra_headers={SESSION_HEADER: sid},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].finish_reason:
            break  # a client that leaves at the finish reason, before the usage and [DONE]
    await stream.close()
    assert [m["role"] for m in await stored(api, sid)] == ["user", "assistant"]


async def test_two_turns_at_once_never_interleave_in_one_session(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    upstream.latency_seconds = 0.3
    first = [
        {"role": "system", "content": "MARKER-warmup"},
        {"role": "user", "content": "MARKER-a"},
    ]
    second = [
        {"role": "system", "content": "MARKER-real"},
        {"role": "user", "content": "MARKER-b"},
    ]
    raws = await asyncio.gather(*(raw_chat(client, sid, messages) for messages in (first, second)))
    sessions = [
        sid,
        *(
            raw.headers["x-precis-branched-from"]
            for raw in raws
            if "x-precis-branched-from" in raw.headers
        ),
    ]
    assert len(sessions) == 2, "the turn that stored second branched the session"
    contents = [
        [message["content"] for message in await stored(api, session)] for session in sessions
    ]
    expected = [
        [first[0]["content"], first[1]["content"], "MARKER-warmup\nMARKER-a"],
        [second[0]["content"], second[1]["content"], "MARKER-real\nMARKER-b"],
    ]
    assert sorted(contents) == sorted(expected)


async def test_a_stateful_retry_is_answered_again_in_a_branch_not_stored_twice(
    client: AsyncOpenAI, api: httpx.AsyncClient, sid: str
) -> None:
    await chat(client, sid, [{"role": "user", "content": "MARKER-s1 first"}])
    await chat(client, sid, [{"role": "user", "content": "MARKER-s2 second"}])
    raw = await raw_chat(client, sid, [{"role": "user", "content": "MARKER-s2 second"}])
    assert "x-precis-branched-from" in raw.headers
    contents = [message["content"] for message in await stored(api, sid)]
    assert contents.count("MARKER-s2 second") == 1 and len(contents) == 4
    # a stateful client repeating its first words ("yes") is a new message, not a branch
    again = await raw_chat(client, sid, [{"role": "user", "content": "MARKER-s1 first"}])
    assert "x-precis-branched-from" not in again.headers
    assert len(await stored(api, sid)) == 6


async def test_a_branch_keeps_the_sessions_expiry_metadata_and_settings(
    client: AsyncOpenAI, api: httpx.AsyncClient, sid: str
) -> None:
    created = await api.post(
        "/v1/sessions",
        json={
            "id": sid,
            "metadata": {"owner": "ada"},
            "settings": {"keep_last_n": 3},
            "expires_at": "2030-01-01T00:00:00Z",
        },
    )
    assert created.status_code == 201, created.text
    history: list[dict[str, Any]] = [{"role": "user", "content": "MARKER-e1"}]
    answer = await chat(client, sid, history)
    history += [answer.choices[0].message.model_dump(), {"role": "user", "content": "MARKER-e2"}]
    await chat(client, sid, history)
    for resent in (history, [{"role": "system", "content": "MARKER-new start"}, *history]):
        raw = await raw_chat(client, sid, resent)
        assert "x-precis-branched-from" in raw.headers
        session = (await api.get(f"/v1/sessions/{sid}")).json()
        assert session["expires_at"].startswith("2030-01-01")
        assert session["metadata"] == {"owner": "ada"}
        assert session["settings"] == {"keep_last_n": 3}


async def test_a_first_resend_longer_than_the_window_is_stored_and_fitted(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    filler = " ".join(["earlier words of a long conversation"] * 40)
    history: list[dict[str, Any]] = []
    for number in range(20):
        history.append({"role": "user", "content": f"MARKER-old{number} {filler}"})
        history.append({"role": "assistant", "content": f"noted {number}"})
    history.append({"role": "user", "content": "MARKER-now the question"})
    upstream.context_window = WINDOW
    assert count_messages(history) > WINDOW, "the resend alone would overflow the window"
    answer = await chat(client, sid, history)
    assert "MARKER-now" in (answer.choices[0].message.content or "")
    sent = model_calls(upstream)[-1]
    assert sent.prompt_tokens + (sent.max_tokens or 0) <= WINDOW
    assert len(await stored(api, sid)) == len(history) + 1


async def test_two_first_resends_longer_than_the_window_at_once_each_keep_their_history(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    filler = " ".join(["earlier words of a long conversation"] * 40)

    def long_history(name: str) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = []
        for number in range(20):
            history.append({"role": "user", "content": f"MARKER-{name}{number} {filler}"})
            history.append({"role": "assistant", "content": f"noted {name} {number}"})
        return [*history, {"role": "user", "content": f"MARKER-{name}-now the question"}]

    histories = [long_history("left"), long_history("right")]
    assert count_messages(histories[0]) > WINDOW, "each is stored before the model is called"
    upstream.context_window = WINDOW
    upstream.latency_seconds = 0.3
    raws = await asyncio.gather(*(raw_chat(client, sid, history) for history in histories))
    kept = [
        raw.headers["x-precis-branched-from"]
        for raw in raws
        if "x-precis-branched-from" in raw.headers
    ]
    contents = [
        [message["content"] for message in await stored(api, session)] for session in [sid, *kept]
    ]
    for history, raw in zip(histories, raws, strict=True):
        answer = raw.parse().choices[0].message.content
        whole = [message["content"] for message in history] + [answer]
        assert whole in contents, "the turn's whole history and answer are in one session"
    assert contents[0] in [
        [message["content"] for message in history] + [raw.parse().choices[0].message.content]
        for history, raw in zip(histories, raws, strict=True)
    ], "the session goes on with one of the two conversations, whole"


async def test_a_long_history_stored_early_keeps_what_the_session_held_before_it(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    upstream.context_window = WINDOW
    first = {"role": "user", "content": "MARKER-p0 the password is swordfish"}
    answer = await chat(client, sid, [first])
    held = [first, {"role": "assistant", "content": answer.choices[0].message.content}]
    filler = " ".join(["earlier words of a long conversation"] * 40)
    history: list[dict[str, Any]] = []
    for number in range(20):
        history.append({"role": "user", "content": f"MARKER-h{number} {filler}"})
        history.append({"role": "assistant", "content": f"noted {number}"})
    long_turn = [*held, *history, {"role": "user", "content": "MARKER-long question"}]
    other_turn = [*held, {"role": "user", "content": "MARKER-other question"}]
    release, long_turn_called = threading.Event(), threading.Event()

    def responder(messages: list[dict[str, Any]]) -> str:
        text = str(messages)
        if "<transcript" in text:  # the summarizer: perfect recall
            return "\n".join(dict.fromkeys(MARKER_PATTERN.findall(text)))
        if "MARKER-long question" in text:
            long_turn_called.set()
            release.wait(20)
            return "the long answer"
        return "the other answer"

    upstream.responder = responder

    long_task = asyncio.create_task(raw_chat(client, sid, long_turn))
    # its history stored early, it waits for the model
    assert await asyncio.to_thread(long_turn_called.wait, 20)
    # branches the session after what it held, taking that history away
    await raw_chat(client, sid, other_turn)
    release.set()
    await long_task
    whole = [message["content"] for message in long_turn] + ["the long answer"]
    assert [message["content"] for message in await stored(api, sid)] == whole


async def test_a_stream_carries_no_usage_chunk_unless_asked(client: AsyncOpenAI, sid: str) -> None:
    for asked in (False, True):
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"MARKER-usage{asked}"}],
            max_tokens=OUTPUT_TOKENS,
            stream=True,
            extra_headers={SESSION_HEADER: f"{sid}-{asked}"},
            stream_options={"include_usage": True} if asked else openai.omit,
        )
        chunks = [chunk async for chunk in stream]
        assert all(chunk.choices for chunk in chunks) is not asked
        assert (chunks[-1].usage is not None) is asked


async def test_a_session_of_the_other_format_is_a_conflict_no_retry_resolves(
    client: AsyncOpenAI, api: httpx.AsyncClient, sid: str
) -> None:
    item = {"type": "message", "role": "user", "content": "MARKER-items"}
    held = await api.post(f"/v1/sessions/{sid}/messages", json={"items": [{"item": item}]})
    assert held.status_code == 201, held.text
    with pytest.raises(openai.ConflictError) as refused:
        await chat(client, sid, [{"role": "user", "content": "MARKER-chat"}])
    assert refused.value.code == "session_format"
    assert refused.value.response.headers["x-should-retry"] == "false"
