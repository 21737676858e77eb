"""The official Node clients against Precis's chat wires, on both databases: the `openai`
npm package's `chat.completions` (`POST /v1/chat/completions`) and `@anthropic-ai/sdk`'s
`messages` (`POST /v1/messages`, `/v1/messages/count_tokens`), each resending its whole
history every turn, as apps written with them do, to a live server whose model is a fake on
loopback (`mode="marker_echo"`: it repeats every `MARKER-...` token of the prompt it gets).

Each client holds one conversation: a tool called and its result sent back, the answer, a
streamed turn accumulated by the SDK's own stream helper and resent, and one more turn (then
the `openai` client regenerates the streamed turn's answer, which branches the session, and
`@anthropic-ai/sdk` counts the tokens of the first and of the whole request). The tests assert
the answers and that the session stores every message once, in order, whatever was resent.
The steps run once per database (`tests/client/node/sdk_steps.mjs`, driven by
`run_sdk_steps` of `tests/support/node_openai.py`).

Without `node` on PATH the module is skipped with one line. With `node` installed and CI=true,
Node and the pinned packages are required: an unusable Node or a failed install fails the run.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from tests.client.keyed_server import TENANT_KEY, KeyedService, stored
from tests.support.fake_anthropic import MESSAGES_PATH
from tests.support.fake_llm import CHAT_PATH, Call, FakeLLM
from tests.support.node_anthropic import ANTHROPIC_SDK
from tests.support.node_openai import (
    OPENAI_SDK,
    NodeSdk,
    NodeUnavailable,
    node_binary,
    run_sdk_steps,
    skip_or_fail,
)

OPENAI_MODEL = "openai/fake"
"""The Chat Completions client's model: litellm's OpenAI path to the fake."""

ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5"
"""The Messages client's model: litellm's Anthropic path to the fake, as a Claude app's
requests would go on to Anthropic."""

OUTPUT_TOKENS = 200
REQUEST_TIMEOUT_MS = 30_000
"""Per request of the Node clients: generous for a loaded CI machine."""

SESSION_HEADER = "X-Precis-Session"

SYSTEM = "MARKER-rules Answer in one line."
ASKED = "MARKER-paris What is the weather in Paris?"
TOOL_RESULT = "MARKER-sunny 21 °C"
NEXT = "MARKER-tokyo And in 東京?"
LAST = "MARKER-last Thanks!"
"""The conversation's turns; each marker comes back in every later answer (`marker_echo`)."""

TOOL_NAME = "get_weather"
TOOL_ARGUMENTS = {"city": "Paris"}
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}

ANSWERED = "MARKER-rules\nMARKER-paris\nMARKER-sunny"
STREAMED = f"{ANSWERED}\nMARKER-tokyo"
LAST_ANSWER = f"{STREAMED}\nMARKER-last"
"""What the fake answers to the tool's result, the streamed turn and the last turn: the markers
of the whole conversation, so an answer shows the model got the stored context."""


try:  # at collection, so a machine without node skips the module in one line
    node_binary()
except NodeUnavailable as problem:
    skip_or_fail(problem, module_level=True)


@pytest.fixture(scope="module")
def node_ready() -> None:
    """The pinned packages, installed on first use (`NodeUnavailable` if they cannot be)."""
    try:
        OPENAI_SDK.package_dir()
        ANTHROPIC_SDK.package_dir()
    except NodeUnavailable as problem:
        skip_or_fail(problem, module_level=False)


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    return keyed_service.fake_for_module(mode="marker_echo")


@pytest.fixture(scope="module")
def precis_url(node_ready: None, fake: FakeLLM, keyed_service: KeyedService) -> str:
    return keyed_service.url_allowing(OPENAI_MODEL, ANTHROPIC_MODEL)


def tool_call_of(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [call] = message["tool_calls"]
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def user_texts(call: Call) -> list[str]:
    """The user messages of a call the fake got, as text."""
    return _texts(call, "user")


def tool_messages(call: Call) -> list[str]:
    """The tool results of a call the fake got, as text."""
    return _texts(call, "tool")


def _texts(call: Call, role: str) -> list[str]:
    texts: list[str] = []
    for message in call.messages:
        if message["role"] != role:
            continue
        content = message["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        texts.append(content)
    return texts


@dataclass
class Run:
    """What one client's steps answered, and the model calls they caused."""

    session: str
    answers: dict[str, Any]
    calls: list[Call]


def run_conversation(
    fake: FakeLLM,
    sdk: NodeSdk,
    base_url: str,
    session: str,
    steps: list[dict[str, Any]],
    headers: dict[str, str] | None = None,
) -> Run:
    """Run `steps`; the fake answers the first model call with a call of the tool."""
    fake.call_tool_next(TOOL_NAME, json.dumps(TOOL_ARGUMENTS))
    before = len(fake.calls)
    answers = run_sdk_steps(
        sdk,
        base_url,
        TENANT_KEY,
        steps,
        client_options={
            "maxRetries": 0,
            "timeout": REQUEST_TIMEOUT_MS,
            "defaultHeaders": headers or {},
        },
    )
    return Run(session, answers, fake.calls[before:])


# The openai package: POST /v1/chat/completions ---------------------------------------------

OPENAI_TOOL = {
    "type": "function",
    "function": {"name": TOOL_NAME, "description": "The weather.", "parameters": TOOL_SCHEMA},
}


def chat_steps() -> list[dict[str, Any]]:
    """The Chat Completions conversation: every request resends the history so far; the last
    step resends the streamed turn's request again, as a client regenerating its answer."""
    history: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ASKED},
    ]

    def turn(name: str, extra: dict[str, Any] | None = None, **step: Any) -> dict[str, Any]:
        body = {"model": OPENAI_MODEL, "messages": list(history), "max_tokens": OUTPUT_TOKENS}
        return {
            "name": name,
            "op": "chat.completions.create",
            "args": [body | (extra or {})],
        } | step

    tools = {"tools": [OPENAI_TOOL]}
    steps = [turn("ask", tools)]
    history.append("$ref:ask.choices.0.message")
    history.append(
        {
            "role": "tool",
            "tool_call_id": "$ref:ask.choices.0.message.tool_calls.0.id",
            "content": TOOL_RESULT,
        }
    )
    steps.append(turn("answer", tools, with_response=True))
    history.append("$ref:answer.body.choices.0.message")
    history.append({"role": "user", "content": NEXT})
    steps.append(turn("streamed", op="chat.completions.stream", final="finalChatCompletion"))
    regenerated = turn("regenerated", with_response=True)
    history.append("$ref:streamed.final.choices.0.message")
    history.append({"role": "user", "content": LAST})
    steps.append(turn("last", {"stream": True}))
    return [*steps, regenerated]


@pytest.fixture(scope="module")
def chat(fake: FakeLLM, precis_url: str) -> Run:
    session = f"node-chat-{uuid.uuid4().hex[:12]}"
    return run_conversation(
        fake, OPENAI_SDK, f"{precis_url}/v1", session, chat_steps(), {SESSION_HEADER: session}
    )


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]
    )


def test_chat_a_tool_call_is_answered_and_its_result_sent_back(chat: Run) -> None:
    asked = chat.answers["ask"]["choices"][0]
    assert asked["finish_reason"] == "tool_calls"
    assert tool_call_of(asked["message"]) == (TOOL_NAME, TOOL_ARGUMENTS)
    answered = chat.answers["answer"]["body"]["choices"][0]
    assert (answered["finish_reason"], answered["message"]["content"]) == ("stop", ANSWERED)


def test_chat_answers_name_the_session_without_branching(chat: Run) -> None:
    headers = chat.answers["answer"]["headers"]
    assert headers["x-precis-session"] == chat.session
    assert "x-precis-branched-from" not in headers


def test_chat_streams_are_relayed_in_pieces_and_accumulated_by_the_sdk(chat: Run) -> None:
    streamed = chat.answers["streamed"]
    assert len(streamed["data"]) > 2, "the answer arrives in pieces"
    assert streamed_text(streamed["data"]) == STREAMED
    assert streamed["final"]["choices"][0]["message"]["content"] == STREAMED
    last = chat.answers["last"]["data"]
    assert streamed_text(last) == LAST_ANSWER
    finished = [c["choices"][0].get("finish_reason") for c in last if c["choices"]]
    assert finished[-1] == "stop" and not any(finished[:-1])


def test_chat_the_model_gets_each_message_once(chat: Run) -> None:
    assert [call.path for call in chat.calls] == [CHAT_PATH] * 5
    # after the tool's turn: the stored context and the new messages, each once
    assert [len(call.messages) for call in chat.calls[2:]] == [6, 8, 6]
    assert user_texts(chat.calls[3]) == [ASKED, NEXT, LAST]


def test_chat_the_tools_result_reaches_the_model_once(chat: Run) -> None:
    assert tool_messages(chat.calls[1]) == [TOOL_RESULT]


def test_chat_the_session_stores_each_unique_message_once(chat: Run, precis_url: str) -> None:
    earlier = chat.answers["regenerated"]["headers"]["x-precis-branched-from"]
    kept = stored(precis_url, earlier)
    assert [(m["role"], m.get("content")) for m in kept] == [
        ("system", SYSTEM),
        ("user", ASKED),
        ("assistant", None),
        ("tool", TOOL_RESULT),
        ("assistant", ANSWERED),
        ("user", NEXT),
        ("assistant", STREAMED),
        ("user", LAST),
        ("assistant", LAST_ANSWER),
    ]
    assert tool_call_of(kept[2]) == (TOOL_NAME, TOOL_ARGUMENTS)
    assert kept[3]["tool_call_id"] == kept[2]["tool_calls"][0]["id"]


def test_chat_a_regenerated_answer_branches_the_session(chat: Run, precis_url: str) -> None:
    regenerated = chat.answers["regenerated"]
    assert regenerated["headers"]["x-precis-session"] == chat.session
    assert regenerated["headers"]["x-precis-branched-from"].startswith(f"{chat.session}:branch-")
    assert regenerated["body"]["choices"][0]["message"]["content"] == STREAMED
    kept = stored(precis_url, chat.session)
    earlier = stored(precis_url, regenerated["headers"]["x-precis-branched-from"])
    assert kept == [*earlier[:6], {"role": "assistant", "content": STREAMED}]


# @anthropic-ai/sdk: POST /v1/messages and /v1/messages/count_tokens --------------------------

ANTHROPIC_TOOL = {"name": TOOL_NAME, "description": "The weather.", "input_schema": TOOL_SCHEMA}


def messages_steps(session: str) -> list[dict[str, Any]]:
    """The Messages conversation, its session named by `metadata.user_id`: every request
    resends the turns so far; the token counts are of the first and of every turn."""
    turns: list[Any] = [{"role": "user", "content": ASKED}]

    def request(**extra: Any) -> dict[str, Any]:
        return {
            "model": ANTHROPIC_MODEL,
            "max_tokens": OUTPUT_TOKENS,
            "system": SYSTEM,
            "metadata": {"user_id": session},
            "tools": [ANTHROPIC_TOOL],
            "messages": list(turns),
        } | extra

    def counted(name: str) -> dict[str, Any]:
        body = {key: request()[key] for key in ("model", "system", "tools", "messages")}
        return {"name": name, "op": "messages.countTokens", "args": [body]}

    steps = [counted("count_first"), {"name": "ask", "op": "messages.create", "args": [request()]}]
    turns.append({"role": "assistant", "content": "$ref:ask.content"})
    turns.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "$ref:ask.content.0.id",
                    "content": TOOL_RESULT,
                }
            ],
        }
    )
    steps.append(
        {"name": "answer", "op": "messages.create", "args": [request()], "with_response": True}
    )
    turns.append({"role": "assistant", "content": "$ref:answer.body.content"})
    turns.append({"role": "user", "content": [{"type": "text", "text": NEXT}]})
    steps.append(
        {"name": "streamed", "op": "messages.stream", "args": [request()], "final": "finalMessage"}
    )
    turns.append({"role": "assistant", "content": "$ref:streamed.final.content"})
    turns.append({"role": "user", "content": LAST})
    steps.append({"name": "last", "op": "messages.create", "args": [request()]})
    turns.append({"role": "assistant", "content": "$ref:last.content"})
    steps.append(counted("count_all"))
    return steps


@pytest.fixture(scope="module")
def messages(fake: FakeLLM, precis_url: str) -> Run:
    session = f"node-messages-{uuid.uuid4().hex[:12]}"
    return run_conversation(fake, ANTHROPIC_SDK, precis_url, session, messages_steps(session))


def text_of(message: dict[str, Any]) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


def test_messages_a_tool_use_is_answered_and_its_result_sent_back(messages: Run) -> None:
    asked = messages.answers["ask"]
    assert asked["stop_reason"] == "tool_use"
    [use] = asked["content"]
    assert (use["type"], use["name"], use["input"]) == ("tool_use", TOOL_NAME, TOOL_ARGUMENTS)
    answered = messages.answers["answer"]["body"]
    assert (answered["stop_reason"], text_of(answered)) == ("end_turn", ANSWERED)
    headers = messages.answers["answer"]["headers"]
    assert headers["x-precis-session"] == messages.session
    assert "x-precis-branched-from" not in headers


def test_messages_a_stream_ends_in_the_sdks_final_message(messages: Run) -> None:
    streamed = messages.answers["streamed"]
    kinds = [event["type"] for event in streamed["data"]]
    assert (kinds[0], kinds[-1]) == ("message_start", "message_stop")
    assert kinds.count("content_block_delta") > 1, "the text arrives in pieces"
    assert (streamed["final"]["stop_reason"], text_of(streamed["final"])) == ("end_turn", STREAMED)
    assert text_of(messages.answers["last"]) == LAST_ANSWER


def test_messages_count_tokens_counts_the_whole_request(messages: Run) -> None:
    first = messages.answers["count_first"]["input_tokens"]
    every = messages.answers["count_all"]["input_tokens"]
    assert 0 < first < every


def test_messages_the_model_gets_each_message_once(messages: Run) -> None:
    assert [call.path for call in messages.calls] == [MESSAGES_PATH] * 4
    assert user_texts(messages.calls[-1]) == [ASKED, NEXT, LAST]
    assert tool_messages(messages.calls[-1]) == [TOOL_RESULT]


def test_messages_the_tools_result_reaches_the_model_once(messages: Run) -> None:
    assert tool_messages(messages.calls[1]) == [TOOL_RESULT]


def test_messages_the_session_stores_each_unique_message_once(
    messages: Run, precis_url: str
) -> None:
    kept = stored(precis_url, messages.session)
    assert [(m["role"], m.get("content")) for m in kept] == [
        ("system", SYSTEM),
        ("user", ASKED),
        ("assistant", None),
        ("tool", TOOL_RESULT),
        ("assistant", ANSWERED),
        ("user", NEXT),
        ("assistant", STREAMED),
        ("user", LAST),
        ("assistant", LAST_ANSWER),
    ]
    assert tool_call_of(kept[2]) == (TOOL_NAME, TOOL_ARGUMENTS)
    assert (
        kept[3]["tool_call_id"]
        == kept[2]["tool_calls"][0]["id"]
        == messages.answers["ask"]["content"][0]["id"]
    )


BETA_ASKED = "MARKER-beta hello"


@pytest.fixture(scope="module")
def beta(precis_url: str) -> dict[str, Any]:
    """What the SDK's beta namespace (`client.beta.messages.create`) answered: this release
    posts it to `/v1/messages` as the rest (earlier ones add `?beta=true`)."""
    request = {
        "model": ANTHROPIC_MODEL,
        "max_tokens": OUTPUT_TOKENS,
        "messages": [{"role": "user", "content": BETA_ASKED}],
        "metadata": {"user_id": f"node-beta-{uuid.uuid4().hex[:12]}"},
    }
    step = {"name": "beta", "op": "beta.messages.create", "args": [request], "expect_error": True}
    answers = run_sdk_steps(
        ANTHROPIC_SDK,
        precis_url,
        TENANT_KEY,
        [step],
        client_options={"maxRetries": 0, "timeout": REQUEST_TIMEOUT_MS},
    )
    answer: dict[str, Any] = answers["beta"]
    return answer


def test_messages_the_sdks_beta_namespace_is_served(beta: dict[str, Any]) -> None:
    assert "error" not in beta, beta["error"]
    assert text_of(beta) == "MARKER-beta"
