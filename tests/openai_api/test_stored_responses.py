"""Stored responses and `previous_response_id` through the official `openai` package: every
response is kept unless `store` is false, a chain of responses is a Precis session, and two
turns naming the same previous response branch it (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from tests.support.fake_llm import FakeLLM, running_fake_llm

MODEL = "openai/fake"
WINDOW = 4_000


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
    }


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


async def test_a_response_is_stored_retrieved_listed_and_deleted(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    answer = await client.responses.create(model=MODEL, input="MARKER-alpha first")
    assert answer.id.startswith("resp_") and answer.model_extra is not None
    assert answer.model_extra["store"] is True
    again = await client.responses.retrieve(answer.id)
    assert again.id == answer.id and again.output_text == answer.output_text == "MARKER-alpha"
    items = await client.responses.input_items.list(answer.id)
    assert [item.type for item in items.data] == ["message"]
    assert "MARKER-alpha first" in str(items.data[0])
    # the chain is a session under the response's id
    session = await api.get(f"/v1/sessions/{answer.id}/messages")
    assert [m["role"] for m in session.json()["messages"]] == ["user", "assistant"]
    deleted = await client.responses.with_raw_response.delete(answer.id)
    assert deleted.http_response.json() == {"id": answer.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError) as gone:
        await client.responses.retrieve(answer.id)
    assert answer.id in gone.value.message


async def test_previous_response_id_continues_the_chain(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    first = await client.responses.create(
        model=MODEL, input="MARKER-one remember", instructions="be brief"
    )
    assert upstream.calls[-1].request.get("instructions") == "be brief"
    second = await client.responses.create(
        model=MODEL, input="MARKER-two", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    third = await client.responses.create(
        model=MODEL, input="MARKER-three", previous_response_id=second.id
    )
    assert third.output_text.split("\n") == ["MARKER-one", "MARKER-two", "MARKER-three"]
    assert "instructions" not in upstream.calls[-1].request, "instructions are not carried over"
    items = await client.responses.input_items.list(third.id)
    assert len(items.data) == 1 and "MARKER-three" in str(items.data[0])


async def test_two_turns_after_the_same_response_branch_the_chain(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    root = await client.responses.create(model=MODEL, input="MARKER-root")
    left = await client.responses.create(
        model=MODEL, input="MARKER-left", previous_response_id=root.id
    )
    right = await client.responses.create(
        model=MODEL, input="MARKER-right", previous_response_id=root.id
    )
    assert right.output_text.split("\n") == ["MARKER-root", "MARKER-right"]
    after_left = await client.responses.create(
        model=MODEL, input="MARKER-again", previous_response_id=left.id
    )
    assert after_left.output_text.split("\n") == [
        "MARKER-root",
        "MARKER-left",
        "MARKER-again",
    ]
    fork = (await api.get(f"/v1/sessions/{right.id}")).json()
    assert fork["forked_from"] == root.id and fork["fork_seq"] == 2


async def test_unknown_and_conflicting_ids_are_refused(client: AsyncOpenAI, app: FastAPI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.create(
            model=MODEL, input="hi", previous_response_id="resp_" + "0" * 48
        )
    assert "resp_" + "0" * 48 in unknown.value.message
    assert unknown.value.code == "response_not_found"
    conversation = await client.conversations.create()
    first = await client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as both:
        await client.responses.create(
            model=MODEL, input="hi", conversation=conversation.id, previous_response_id=first.id
        )
    assert "Mutually exclusive" in both.value.message
    with pytest.raises(openai.BadRequestError):
        await client.responses.cancel(first.id)
    # another tenant's response is a missing one
    app.state.tenant_keys = {"key-a": "tenant-a", "key-b": "tenant-b"}
    try:
        owned = await client.with_options(api_key="key-a").responses.create(
            model=MODEL, input="mine"
        )
        with pytest.raises(openai.NotFoundError):
            await client.with_options(api_key="key-b").responses.retrieve(owned.id)
        with pytest.raises(openai.NotFoundError):
            await client.with_options(api_key="key-b").responses.create(
                model=MODEL, input="steal", previous_response_id=owned.id
            )
    finally:
        app.state.tenant_keys = {}


async def test_a_streamed_chain_is_stored_too(client: AsyncOpenAI) -> None:
    first = await client.responses.create(model=MODEL, input="MARKER-s1")
    stream = await client.responses.create(
        model=MODEL, input="MARKER-s2", previous_response_id=first.id, stream=True
    )
    completed = [event async for event in stream if event.type == "response.completed"]
    [done] = completed
    assert done.response.previous_response_id == first.id
    kept = await client.responses.retrieve(done.response.id)
    assert kept.output_text == "MARKER-s1\nMARKER-s2"


async def test_input_may_be_left_out_when_the_conversation_gives_the_context(
    client: AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "MARKER-stored question"}]
    )
    answer = await client.responses.create(model=MODEL, conversation=conversation.id)
    assert answer.output_text == "MARKER-stored"
    items = await client.responses.input_items.list(answer.id)
    assert items.data == []
    listed = [item async for item in client.conversations.items.list(conversation.id)]
    assert len(listed) == 2  # the stored question and the answer, nothing more
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model=MODEL)
    assert refused.value.param == "input"


async def test_truncation_disabled_refuses_a_context_that_does_not_fit(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    long_text = " ".join(f"word{index % 97}" for index in range(900))
    conversation = await client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": f"MARKER-long{turn} {long_text}"}
            for turn in range(5)
        ]
    )
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model=MODEL, conversation=conversation.id, input="MARKER-q", truncation="disabled"
        )
    assert refused.value.code == "context_length_exceeded"
    summaries = await api.get(f"/v1/sessions/{conversation.id}/summaries")
    assert summaries.json()["summaries"] == [], "nothing summarized"
    listed = [item async for item in client.conversations.items.list(conversation.id)]
    assert len(listed) == 5, "nothing stored"
    # the default, auto, fits the context to the window (docs/design.md, "OpenAI Responses")
    answer = await client.responses.create(
        model=MODEL, conversation=conversation.id, input="MARKER-q"
    )
    assert answer.output_text.endswith("MARKER-q")


async def test_input_tokens_count_what_a_turn_would_send(client: AsyncOpenAI) -> None:
    alone = await client.responses.input_tokens.count(model=MODEL, input="MARKER-count me")
    assert alone.object == "response.input_tokens" and alone.input_tokens > 0
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "stored words " * 50}]
    )
    with_context = await client.responses.input_tokens.count(
        model=MODEL, input="MARKER-count me", conversation=conversation.id
    )
    assert with_context.input_tokens > alone.input_tokens + 50
    first = await client.responses.create(model=MODEL, input="chain words " * 50)
    chained = await client.responses.input_tokens.count(
        model=MODEL, input="MARKER-count me", previous_response_id=first.id
    )
    assert chained.input_tokens > alone.input_tokens + 50
    japanese = "東京の天気は晴れです。明日は雨が降るでしょう。" * 20
    cl100k = await client.responses.input_tokens.count(input=japanese)
    o200k = await client.responses.input_tokens.count(model="gpt-4o", input=japanese)
    assert o200k.input_tokens < cl100k.input_tokens * 0.8, "the model's own encoding"
    with pytest.raises(openai.NotFoundError):
        await client.responses.input_tokens.count(
            input="hi", previous_response_id="resp_" + "1" * 48
        )


async def test_a_model_named_without_its_provider_is_the_allowed_one(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    answer = await client.responses.create(model="fake", input="MARKER-bare name")
    assert answer.output_text == "MARKER-bare"
    chat = await client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "MARKER-bare chat"}]
    )
    assert chat.choices[0].message.content == "MARKER-bare"
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(model="other", input="hi")
