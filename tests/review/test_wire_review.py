"""Review of the Chat Completions and Messages wires: behaviour checked and found correct
(tenancy of the session ladder, `x-api-key` only on the Messages routes, the upstream key kept
out of error answers, cut streams storing nothing, a sequential retry of a resent history
storing its turn once), through the official `openai` and `anthropic` clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI

from tests.support.fake_llm import CHAT_PATH, FakeLLM, running_fake_llm

MODEL = "openai/fake"
WINDOW = 3_000
OUTPUT_TOKENS = 200
UPSTREAM_KEY = "sk-upstream-review-5d1e0b"
KEY_A, KEY_B = "key-review-a", "key-review-b"
SESSION_HEADER = "X-Precis-Session"


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
        "api_keys": f"tenant-a:{KEY_A},tenant-b:{KEY_B}",
        "model_allowed": MODEL,
        "model_api_base": upstream.base_url,
        "model_api_key": UPSTREAM_KEY,
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
async def http(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def openai_client(http: httpx2.AsyncClient, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://localhost/v1", api_key=key, http_client=http, max_retries=0
    )


def anthropic_client(http: httpx2.AsyncClient, key: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url="http://localhost", api_key=key, http_client=http, max_retries=0
    )


def model_prompts(fake: FakeLLM) -> list[list[dict[str, Any]]]:
    """The messages of the turns' calls (the summarizer's carry its transcript tag)."""
    return [
        call.messages
        for call in fake.calls
        if call.path == CHAT_PATH and "<transcript" not in str(call.messages)
    ]


async def stored(api: httpx.AsyncClient, session: str, key: str) -> list[dict[str, Any]]:
    answer = await api.get(
        f"/v1/sessions/{session}/messages",
        params={"limit": 1000},
        headers={"authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]  # type: ignore[no-any-return]


async def test_one_session_id_names_a_session_per_tenant(
    http: httpx2.AsyncClient, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    tenant_a, tenant_b = openai_client(http, KEY_A), openai_client(http, KEY_B)
    await tenant_a.chat.completions.create(
        model=MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=[{"role": "user", "content": "MARKER-secret-of-a"}],
        extra_headers={SESSION_HEADER: sid},
    )
    # the same name from tenant B: by header, by metadata, by the same first message
    named: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({SESSION_HEADER: sid}, {}),
        ({}, {"metadata": {"session_id": sid}}),
        ({}, {}),
    ]
    for headers, body in named:
        answer = await tenant_b.chat.completions.create(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "MARKER-secret-of-a"}],
            extra_headers=headers,
            extra_body=body,
        )
        assert answer.choices[0].message.content == "MARKER-secret-of-a"
    prompts = model_prompts(upstream)
    assert all(len(prompt) == 1 for prompt in prompts[1:]), prompts
    assert len(await stored(api, sid, KEY_A)) == 2
    # tenant B's session of that name is its own
    assert [m["role"] for m in await stored(api, sid, KEY_B)] == ["user", "assistant"]


async def test_x_api_key_is_read_on_the_messages_routes_only(
    api: httpx.AsyncClient, sid: str
) -> None:
    refused = await api.get(f"/v1/sessions/{sid}", headers={"x-api-key": KEY_A})
    assert refused.status_code == 401
    chat = await api.post(
        "/v1/chat/completions",
        headers={"x-api-key": KEY_A},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 401
    assert chat.json()["error"]["code"] == "invalid_api_key"
    # an invalid Authorization is not rescued by a valid x-api-key
    both = await api.post(
        "/v1/messages/count_tokens",
        headers={"authorization": "Bearer wrong", "x-api-key": KEY_A},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert both.status_code == 401
    assert both.json()["error"]["type"] == "authentication_error"
    counted = await api.post(
        "/v1/messages/count_tokens",
        headers={"x-api-key": KEY_A},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0


@pytest.mark.parametrize("status", [401, 500])
async def test_the_upstream_key_stays_out_of_error_answers(
    http: httpx2.AsyncClient, upstream: FakeLLM, sid: str, status: int
) -> None:
    upstream.fail_next(status, times=2, message=f"bad key {UPSTREAM_KEY} for this account")
    with pytest.raises(openai.APIStatusError) as chat_failed:
        await openai_client(http, KEY_A).chat.completions.create(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={SESSION_HEADER: sid},
        )
    with pytest.raises(anthropic.APIStatusError) as messages_failed:
        await anthropic_client(http, KEY_A).messages.create(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={SESSION_HEADER: sid},
        )
    for failed in (chat_failed.value, messages_failed.value):
        assert failed.status_code == 502
        assert UPSTREAM_KEY not in str(failed.body) and UPSTREAM_KEY not in failed.message


async def test_a_stream_the_model_cuts_stores_nothing(
    http: httpx2.AsyncClient, api: httpx.AsyncClient, upstream: FakeLLM, sid: str
) -> None:
    upstream.mode = "long"
    upstream.long_words = 40
    upstream.cut_next_stream(6)
    with pytest.raises(openai.APIError):
        stream = await openai_client(http, KEY_A).chat.completions.create(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "MARKER-cut"}],
            stream=True,
            extra_headers={SESSION_HEADER: sid},
        )
        async for _chunk in stream:
            pass
    upstream.cut_next_stream(6)
    with pytest.raises(anthropic.APIStatusError):
        async with anthropic_client(http, KEY_A).messages.stream(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=[{"role": "user", "content": "MARKER-cut"}],
            extra_headers={SESSION_HEADER: sid},
        ) as events:
            async for _event in events:
                pass
    missing = await api.get(f"/v1/sessions/{sid}", headers={"authorization": f"Bearer {KEY_A}"})
    assert missing.status_code == 404


async def test_a_resend_retried_after_its_turn_was_stored_is_not_stored_twice(
    http: httpx2.AsyncClient, api: httpx.AsyncClient, sid: str
) -> None:
    client = openai_client(http, KEY_A)
    history: list[dict[str, Any]] = [{"role": "user", "content": "MARKER-q1"}]
    first = await client.chat.completions.create(
        model=MODEL,
        max_tokens=OUTPUT_TOKENS,
        messages=history,  # type: ignore[arg-type]
        extra_headers={SESSION_HEADER: sid},
    )
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "MARKER-q2"},
    ]
    for _ in range(2):  # the answer of the first never reached the client: it sends it again
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL,
            max_tokens=OUTPUT_TOKENS,
            messages=history,  # type: ignore[arg-type]
            extra_headers={SESSION_HEADER: sid},
        )
    kept = await stored(api, sid, KEY_A)
    assert [m["role"] for m in kept] == ["user", "assistant", "user", "assistant"]
    earlier = raw.headers["x-precis-branched-from"]
    assert len(await stored(api, earlier, KEY_A)) == 4
