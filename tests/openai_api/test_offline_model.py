"""`precis/offline`, the model Precis serves itself, through the official `openai` package: in
development mode it answers `POST /v1/responses` with no key, no MODEL_* setting and no litellm
call, through the same turn (context fitted, the turn stored once); with API_KEYS it is refused
like any model not allowed (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from api import upstream
from api.compat import model_limits
from api.main import create_app
from api.offline_model import OFFLINE_MODEL, REPLY_TAG
from tests.conftest import make_settings
from tests.helpers import text_of

TENANT_KEY = "offline-test-key"
"""The one key of the keyed server, which refuses the offline model."""

FIRST = "My name is Ada and my order 1234 is late."
"""What the first turn says: the second turn's answer must remember it."""


@pytest.fixture(autouse=True)
def no_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of litellm (a model call, a window looked up) fails the test."""

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the offline model used litellm")

    monkeypatch.setattr(upstream, "load_litellm", refused)
    monkeypatch.setattr(model_limits, "model_context_window", refused)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


async def items_of(client: AsyncOpenAI, conversation_id: str) -> list[dict[str, Any]]:
    listed = client.conversations.items.list(conversation_id, order="asc")
    return [item.model_dump(mode="json", exclude_none=True) async for item in listed]


async def test_a_second_turn_answers_from_the_stored_first_one_with_usage(
    client: AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model=OFFLINE_MODEL, input=FIRST, conversation=conversation.id
    )
    assert first.status == "completed" and first.model == OFFLINE_MODEL
    assert first.output_text.startswith(f"{REPLY_TAG} You said: {FIRST}")
    assert "the conversation starts here" in first.output_text
    second = await client.responses.create(
        model=OFFLINE_MODEL, input="What is my name?", conversation=conversation.id
    )
    assert second.conversation is not None and second.conversation.id == conversation.id
    assert second.output_text.startswith(f"{REPLY_TAG} You said: What is my name?")
    assert f"user: {FIRST}" in second.output_text, "the memory holds the stored first turn"
    assert REPLY_TAG not in second.output_text.split("\n", 1)[1], "its own replies left out"
    usage = second.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]
    stored = await items_of(client, conversation.id)
    assert [text_of(item) for item in stored] == [
        FIRST,
        first.output_text,
        "What is my name?",
        second.output_text,
    ]


async def test_a_streamed_turn_sends_the_events_of_a_real_stream_and_is_stored_once(
    client: AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    await client.responses.create(model=OFFLINE_MODEL, input=FIRST, conversation=conversation.id)
    stream = await client.responses.create(
        model=OFFLINE_MODEL, input="Where is my order?", conversation=conversation.id, stream=True
    )
    kinds: list[str] = []
    deltas: list[str] = []
    numbers: list[int] = []
    completed = None
    async for event in stream:
        kinds.append(event.type)
        numbers.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert len(deltas) > 1 and numbers == list(range(len(kinds)))
    assert completed is not None and completed.conversation is not None
    assert completed.conversation.id == conversation.id
    assert "".join(deltas) == completed.output_text
    assert f"user: {FIRST}" in completed.output_text
    assert completed.usage is not None and completed.usage.output_tokens > 0
    stored = await items_of(client, conversation.id)
    assert [text_of(item) for item in stored][2:] == ["Where is my order?", completed.output_text]


async def test_an_answer_cut_at_max_output_tokens_is_incomplete_and_stored(
    client: AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    answer = await client.responses.create(
        model=OFFLINE_MODEL, input=FIRST, conversation=conversation.id, max_output_tokens=8
    )
    assert answer.status == "incomplete"
    assert answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens"
    assert answer.usage is not None and answer.usage.output_tokens <= 8
    assert len(await items_of(client, conversation.id)) == 2


async def test_without_a_conversation_it_answers_the_input_alone(client: AsyncOpenAI) -> None:
    answer = await client.responses.create(model=OFFLINE_MODEL, input="hello")
    assert answer.output_text.startswith(f"{REPLY_TAG} You said: hello")
    assert "the conversation starts here" in answer.output_text


async def test_with_api_keys_it_is_refused_as_a_model_not_allowed(database_url: str) -> None:
    settings = make_settings(
        database_url, api_keys=f"a:{TENANT_KEY}", summary_workers=0, model_allowed=OFFLINE_MODEL
    )
    app = create_app(settings)
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http,
    ):
        client = AsyncOpenAI(
            base_url="http://localhost/v1", api_key=TENANT_KEY, http_client=http, max_retries=0
        )
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(
                model=OFFLINE_MODEL, input="hi", conversation="conv_never_created"
            )
        with pytest.raises(openai.BadRequestError) as another:
            await client.responses.create(model="openai/gpt-4o-mini", input="hi")
    assert refused.value.status_code == 400
    body: Any = refused.value.body
    assert body["param"] == "model" and body["code"] == "model_not_allowed"
    assert "development mode only" in body["message"]
    assert OFFLINE_MODEL not in str(another.value), "offered in development mode only"


async def test_the_chat_wire_answers_offline_from_the_stored_session(
    client: AsyncOpenAI, sid: str
) -> None:
    headers = {"X-Precis-Session": sid}
    history: list[Any] = [{"role": "user", "content": FIRST}]
    first = await client.chat.completions.create(
        model=OFFLINE_MODEL, messages=history, extra_headers=headers
    )
    text = first.choices[0].message.content or ""
    assert text.startswith(f"{REPLY_TAG} You said: {FIRST}")
    history += [first.choices[0].message.model_dump(), {"role": "user", "content": "My name?"}]
    stream = await client.chat.completions.create(
        model=OFFLINE_MODEL,
        messages=history,
        extra_headers=headers,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed.startswith(f"{REPLY_TAG} You said: My name?")
    assert f"user: {FIRST}" in streamed, "the memory holds the stored first turn"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/responses", {"input": "hi", "temperature": "NaN"}, "temperature"),
        ("/v1/responses", {"input": "hi", "stream": True, "top_p": "Infinity"}, "top_p"),
        ("/v1/responses", {"input": "hi", "metadata": {"x": "-Infinity"}}, "metadata.x"),
        (
            "/v1/responses",
            {"input": [{"role": "user", "content": "hi", "score": "NaN"}]},
            None,
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "temperature": "NaN"},
            "temperature",
        ),
        (
            "/v1/messages",
            {
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "hi"}],
                "temperature": "NaN",
            },
            None,
        ),
    ],
)
async def test_a_number_json_does_not_have_is_refused_and_nothing_stored(
    api: httpx.AsyncClient, path: str, body: dict[str, Any], param: str | None
) -> None:
    """NaN and Infinity (Python's JSON reads them; JSON has neither): 400, nothing stored, and
    no stored response a later read could not answer."""
    text = json.dumps({"model": OFFLINE_MODEL, **body}).replace('"NaN"', "NaN")
    text = text.replace('"Infinity"', "Infinity").replace('"-Infinity"', "-Infinity")
    before = (await api.get("/v1/sessions", params={"limit": 100})).json()
    answer = await api.post(
        path, content=text, headers={"content-type": "application/json", "x-api-key": "dev"}
    )
    after = (await api.get("/v1/sessions", params={"limit": 100})).json()
    assert answer.status_code == 400, answer.text
    assert "finite" in answer.text, answer.text
    if param is not None:
        assert answer.json()["error"]["param"] == param
    assert after == before


USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("named", [False, True], ids=["proxied", "in a session"])
@pytest.mark.parametrize(
    ("messages", "extra", "param", "words"),
    [
        ([{"role": "user", "content": 5}], {}, "messages[0].content", "must be a string or"),
        ([{"role": "user", "content": [5]}], {}, "messages[0].content[0]", "must be an object"),
        ([USER, {"role": "assistant", "tool_calls": "x"}], {}, "messages[1].tool_calls", "a list"),
        ([USER, {"role": "assistant", "tool_calls": [5]}], {}, "messages[1].tool_calls[0]", ""),
        ([{"role": "wizard", "content": "hi"}], {}, "messages[0]", "'role' must be one of"),
        ([USER, {"role": "assistant", "tool_calls": 5}], {}, "messages[1].tool_calls", "a list"),
        (
            [USER, {"role": "assistant", "tool_calls": [{"id": "c1", "function": "f"}]}],
            {},
            "messages[1].tool_calls[0].function",
            "must be an object",
        ),
        ([{"role": "user", "content": "hi", "name": 2**70}], {}, "messages[0].name", ""),
        ([USER], {"stream": True, "stream_options": "x"}, "stream_options", ""),
    ],
)
async def test_a_chat_request_out_of_shape_is_refused_naming_the_field(
    api: httpx.AsyncClient,
    sid: str,
    named: bool,
    messages: list[Any],
    extra: dict[str, Any],
    param: str,
    words: str,
) -> None:
    """In a session, a message or option out of shape is a 400 naming it in words, never a
    server error or a message kept in another shape; a plain proxy call (nothing to store)
    sends the messages to the model as they came, for the model to judge: this one refuses
    them as a model does, in the same words."""
    headers = {"x-api-key": "dev"} | ({"X-Precis-Session": sid} if named else {})
    body = {"model": OFFLINE_MODEL, "messages": messages, **extra}
    answer = await api.post("/v1/chat/completions", json=body, headers=headers)
    kept = await api.get(f"/v1/sessions/{sid}")
    assert kept.status_code == 404
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param, error
    assert words in error["message"] and "Input should" not in error["message"], error


@pytest.mark.parametrize(
    ("path", "field"),
    [("/v1/chat/completions", "session_id"), ("/v1/messages", "user_id")],
)
async def test_a_session_named_by_a_number_is_kept_one_by_an_object_refused(
    api: httpx.AsyncClient, path: str, field: str
) -> None:
    """The body field that names the session: an integer is its digits (memory was silently
    off), any other value but a string a 400 naming the field."""

    async def ask(value: object) -> httpx.Response:
        body = {
            "model": OFFLINE_MODEL,
            "max_tokens": 50,
            "messages": [USER],
            "metadata": {field: value},
        }
        return await api.post(path, json=body, headers={"x-api-key": "dev"})

    named = await ask(424242)
    assert named.status_code == 200, named.text
    assert named.headers["x-precis-session"] == "424242"
    kept = await api.get("/v1/sessions/424242/messages")
    assert kept.json()["messages"][0]["content"] == "hi"
    refused = await ask({"id": 1})
    assert refused.status_code == 400, refused.text
    assert f"metadata.{field} must be a string" in refused.text


@pytest.mark.parametrize(
    "path", ["/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"]
)
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"conversation": "conv_missing", "input": []}, 404, "conversation_not_found"),
        ({"conversation": "not-a-conv", "input": []}, 400, "invalid_conversation_id"),
        (
            {"conversation": "conv_x", "previous_response_id": "resp_x", "input": []},
            400,
            "mutually_exclusive_parameters",
        ),
        ({"input": ""}, 400, "missing_required_parameter"),
        ({"input": []}, 400, "missing_required_parameter"),
    ],
)
async def test_the_responses_routes_refuse_a_context_alike(
    api: httpx.AsyncClient, path: str, body: dict[str, Any], status: int, code: str
) -> None:
    """`/v1/responses`, `input_tokens` and `compact` answer a missing or misnamed context with
    the same status and code; an empty input is no input (counting one needs none)."""
    if path.endswith("input_tokens") and code == "missing_required_parameter":
        status, code = 200, ""
    before = (await api.get("/v1/sessions", params={"limit": 100})).json()
    answer = await api.post(
        path, json={"model": OFFLINE_MODEL, **body}, headers={"x-api-key": "dev"}
    )
    after = (await api.get("/v1/sessions", params={"limit": 100})).json()
    assert answer.status_code == status, answer.text
    if code:
        assert answer.json()["error"]["code"] == code, answer.text
    assert after == before


async def test_a_chain_that_goes_on_in_a_conversation_names_it(client: AsyncOpenAI) -> None:
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model=OFFLINE_MODEL, input="MARKER-first", conversation=conversation.id
    )
    chained = await client.responses.create(
        model=OFFLINE_MODEL, input="MARKER-second", previous_response_id=first.id
    )
    assert chained.conversation is not None and chained.conversation.id == conversation.id
    held = await items_of(client, conversation.id)
    assert len(held) == 4, "the chained turn went on in the conversation"
    apart = await client.responses.create(model=OFFLINE_MODEL, input="MARKER-own chain")
    assert apart.conversation is None


@pytest.mark.parametrize(
    "arguments",
    ['{"a": 123456789012345678901234567890}', "[" * 1_200 + "]" * 1_200],
    ids=["huge number", "deep nesting"],
)
async def test_a_tool_call_with_a_huge_number_is_resent_like_any_other(
    api: httpx.AsyncClient, sid: str, arguments: str
) -> None:
    """Arguments holding an integer past 64 bits (a calculator's, say), or nested deeper than
    JSON is read here: the resend is matched with what is stored, the turn answered, nothing
    stored twice."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": arguments}}
    history: list[dict[str, Any]] = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "123456789012345678901234567891"},
    ]
    headers = {"x-api-key": "dev", "X-Precis-Session": sid}
    for _ in range(2):
        body = {"model": OFFLINE_MODEL, "messages": history}
        answer = await api.post("/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        history = [*history, answer.json()["choices"][0]["message"], USER]
    kept = await api.get(f"/v1/sessions/{sid}/messages")
    assert [m["role"] for m in kept.json()["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


@pytest.mark.parametrize("named", [False, True], ids=["proxied", "in a session"])
@pytest.mark.parametrize("fault", ["nul", "size"])
async def test_a_messages_turn_out_of_shape_is_named_as_the_request_numbers_it(
    api: httpx.AsyncClient, sid: str, named: bool, fault: str
) -> None:
    """The system prompt and each tool result are chat messages of their own once translated:
    the error still names the request's turn."""
    results = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "two"},
    ]
    uses = [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "f", "input": {}},
    ]
    body = {
        "model": OFFLINE_MODEL,
        "max_tokens": 50,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": uses},
            {"role": "user", "content": results},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "bad \u0000 text" if fault == "nul" else "x" * 1_000_001},
        ],
    }
    headers = {"x-api-key": "dev"} | ({"X-Precis-Session": sid} if named else {})
    answer = await api.post("/v1/messages", json=body, headers=headers)
    assert answer.status_code == (400 if fault == "nul" else 413), answer.text
    assert answer.json()["error"]["message"].startswith("messages[4]"), answer.text
    assert not answer.json()["error"]["message"].startswith("messages[4]["), answer.text


async def test_a_session_named_by_text_json_cannot_hold_is_named_by_its_hash(
    api: httpx.AsyncClient,
) -> None:
    """A lone surrogate in `metadata.session_id` (JSON escapes allow one): hashed into a
    session id like any name that is not one, never a server error."""
    text = (
        '{"model": "precis/offline", "metadata": {"session_id": "a\\ud800"},'
        ' "messages": [{"role": "user", "content": "hi"}]}'
    )
    answer = await api.post(
        "/v1/chat/completions",
        content=text,
        headers={"content-type": "application/json", "x-api-key": "dev"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-precis-session"].startswith("wire-")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", "hot"),
        ("temperature", 5),
        ("top_p", 7),
        ("metadata", "x"),
        ("metadata", {"k": 1}),
        ("metadata", {f"k{n}": "v" for n in range(17)}),
        ("tool_choice", 5),
        ("parallel_tool_calls", "x"),
        ("max_tool_calls", -1),
        ("text", "x"),
        ("reasoning", "x"),
        ("include", "x"),
        ("user", 5),
    ],
)
async def test_a_responses_field_of_the_wrong_type_is_refused_not_stored(
    api: httpx.AsyncClient, field: str, value: object
) -> None:
    """A field the response keeps or echoes: a value OpenAI refuses is a 400 naming it, and
    never a stored response that says `"temperature": "hot"`."""
    before = (await api.get("/v1/sessions", params={"limit": 100})).json()
    answer = await api.post(
        "/v1/responses",
        json={"model": OFFLINE_MODEL, "input": "hi", field: value},
        headers={"x-api-key": "dev"},
    )
    after = (await api.get("/v1/sessions", params={"limit": 100})).json()
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"].split(".")[0].split("[")[0] == field, answer.text
    assert after == before
