"""The official `openai` npm package from Node against Precis's Conversations API and
`POST /v1/responses`, on both databases: `new OpenAI({baseURL: "<precis>/v1", apiKey: <Precis
key>})` is the switch. The model behind `/v1/responses` is a fake on loopback (the SDK modules'
shared one, `keyed_service`), set by the module to repeat the user's last message.

The steps run once per database (`tests/client/node/openai_steps.mjs`, driven by
`tests/support/node_openai.py`); each test asserts one behaviour on what they answered. A new
call is one more entry in `STEPS` (`{"name", "op": "responses.create", "args": [...]}`), its
earlier answers reachable as `"$ref:<step>.<path>"`.

Without `node` on PATH the module is skipped with one line. With `node` installed and CI=true,
Node and the pinned package are required: an unusable Node or a failed install fails the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.client.keyed_server import TENANT_KEY, KeyedService
from tests.helpers import said, text_of
from tests.support.fake_llm import RESPONSES_PATH, FakeLLM
from tests.support.node_openai import (
    NodeUnavailable,
    node_binary,
    openai_package_dir,
    run_openai_steps,
    skip_or_fail,
)

REQUEST_TIMEOUT_MS = 30_000
"""Per request of the Node client: generous for a loaded CI machine."""

PAGE_SIZE = 2
"""The `limit` of the lists: smaller than the three items, so they cross a page boundary."""


FIRST, SECOND, THIRD = said("first: from Node"), said("second: Zürich → 東京"), said("third")
ADDED = [FIRST, SECOND, THIRD]
"""The conversation's items in order: one given at create, two added after."""

UNKNOWN_CONVERSATION = "conv_0000000000000000000000000000000000000000"
"""A well-formed conversation id that names nothing."""

MODEL = "openai/fake"
"""The model of the non-streamed turn: litellm speaks the Responses wire format to the fake."""

STREAMED_MODEL = "openai/gpt-4o"
"""The model of the streamed turn: one litellm streams event by event (its window given)."""

ASKED = "Where is order 1234?"
STREAM_ASKED = "And when will it arrive, Zürich → 東京?"
"""The two turns' inputs; the fake (`mode="echo"`) answers each with itself."""

STEPS: list[dict[str, Any]] = [
    {
        "name": "create",
        "op": "conversations.create",
        "args": [{"items": [FIRST], "metadata": {"topic": "node"}}],
    },
    {
        "name": "add",
        "op": "conversations.items.create",
        "args": ["$ref:create.id", {"items": [SECOND, THIRD]}],
    },
    {
        "name": "list_asc",
        "op": "conversations.items.list",
        "args": ["$ref:create.id", {"order": "asc", "limit": PAGE_SIZE}],
    },
    {
        "name": "list_desc",
        "op": "conversations.items.list",
        "args": ["$ref:create.id", {"order": "desc", "limit": PAGE_SIZE}],
    },
    {
        "name": "first_page",
        "op": "conversations.items.list",
        "args": ["$ref:create.id", {"order": "asc", "limit": PAGE_SIZE}],
        "first_page": True,
    },
    {
        "name": "retrieve_item",
        "op": "conversations.items.retrieve",
        "args": ["$ref:add.data.0.id", {"conversation_id": "$ref:create.id"}],
    },
    {"name": "retrieve", "op": "conversations.retrieve", "args": ["$ref:create.id"]},
    {
        "name": "missing",
        "op": "conversations.retrieve",
        "args": [UNKNOWN_CONVERSATION],
        "expect_error": True,
    },
    {"name": "chat", "op": "conversations.create", "args": [{}]},
    {
        "name": "respond",
        "op": "responses.create",
        "args": [{"model": MODEL, "input": ASKED, "conversation": "$ref:chat.id"}],
    },
    {
        "name": "respond_streamed",
        "op": "responses.create",
        "args": [
            {
                "model": STREAMED_MODEL,
                "input": STREAM_ASKED,
                "conversation": "$ref:chat.id",
                "stream": True,
            }
        ],
    },
    {
        "name": "chat_items",
        "op": "conversations.items.list",
        "args": ["$ref:chat.id", {"order": "asc"}],
    },
]


def texts(items: list[dict[str, Any]]) -> list[str]:
    return [text_of(item) for item in items]


try:  # at collection, so a machine without node skips the module in one line
    node_binary()
except NodeUnavailable as problem:
    skip_or_fail(problem, module_level=True)


@pytest.fixture(scope="module")
def node_ready() -> None:
    """The pinned package, installed on first use (`NodeUnavailable` if it cannot be)."""
    try:
        openai_package_dir()
    except NodeUnavailable as problem:
        skip_or_fail(problem, module_level=False)


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    """The model behind `/v1/responses`: it answers the user's last message verbatim."""
    return keyed_service.fake_for_module(mode="echo")


@pytest.fixture(scope="module")
def server_log(keyed_service: KeyedService) -> Path:
    return keyed_service.log


@pytest.fixture(scope="module")
def precis_url(node_ready: None, fake: FakeLLM, keyed_service: KeyedService) -> str:
    return keyed_service.url_allowing(MODEL, STREAMED_MODEL)


@pytest.fixture(scope="module")
def answers(precis_url: str) -> dict[str, Any]:
    """What each of `STEPS` answered, by step name."""
    return run_openai_steps(
        f"{precis_url}/v1",
        TENANT_KEY,
        STEPS,
        client_options={"maxRetries": 0, "timeout": REQUEST_TIMEOUT_MS},
    )


def test_create_answers_a_conversation_with_its_metadata(answers: dict[str, Any]) -> None:
    created = answers["create"]
    assert created["id"].startswith("conv_")
    assert created["object"] == "conversation"
    assert created["metadata"] == {"topic": "node"}
    assert answers["retrieve"]["id"] == created["id"]
    assert answers["retrieve"]["metadata"] == {"topic": "node"}


def test_items_create_answers_a_list_of_the_added_items(answers: dict[str, Any]) -> None:
    added = answers["add"]
    assert added["object"] == "list"
    assert texts(added["data"]) == texts([SECOND, THIRD])
    assert all(item["id"].startswith("msg_") for item in added["data"])


def test_listing_ascending_reads_every_page_oldest_first(answers: dict[str, Any]) -> None:
    listed = answers["list_asc"]["data"]
    assert [{key: item.get(key) for key in FIRST} for item in listed] == ADDED
    assert [item["id"] for item in listed[1:]] == [item["id"] for item in answers["add"]["data"]]


def test_listing_descending_reads_every_page_newest_first(answers: dict[str, Any]) -> None:
    newest_first = answers["list_desc"]["data"]
    assert texts(newest_first) == texts(ADDED[::-1])
    assert [item["id"] for item in newest_first] == [
        item["id"] for item in reversed(answers["list_asc"]["data"])
    ]


def test_a_page_of_the_list_says_there_is_more(answers: dict[str, Any]) -> None:
    page = answers["first_page"]
    assert texts(page["data"]) == texts(ADDED[:PAGE_SIZE])
    assert page["has_more"] is True
    assert page["last_id"] == page["data"][-1]["id"]


def test_retrieving_an_item_answers_it_as_listed(answers: dict[str, Any]) -> None:
    assert answers["retrieve_item"] == answers["list_asc"]["data"][1]


def test_an_unknown_conversation_is_a_not_found_error(answers: dict[str, Any]) -> None:
    error = answers["missing"]["error"]
    assert (error["class"], error["status"]) == ("NotFoundError", 404)
    assert isinstance(error["body"]["message"], str)  # OpenAI's {"error": {"message", ...}}


def test_the_conversation_is_the_one_precis_stores(
    answers: dict[str, Any], precis_url: str
) -> None:
    conversation_id = answers["create"]["id"]
    listed = httpx.get(
        f"{precis_url}/v1/conversations/{conversation_id}/items",
        params={"order": "asc"},
        headers={"Authorization": f"Bearer {TENANT_KEY}"},
    )
    assert listed.status_code == 200
    assert listed.json()["data"] == answers["list_asc"]["data"]


def shape(item: dict[str, Any]) -> tuple[str, str, str]:
    return (item.get("type", "message"), item["role"], text_of(item))


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_a_turn_in_a_conversation_answers_the_model_and_names_the_conversation(
    answers: dict[str, Any],
) -> None:
    response = answers["respond"]
    assert (response["object"], response["status"]) == ("response", "completed")
    assert response["id"].startswith("resp_")
    assert response["output_text"] == ASKED
    assert response["conversation"]["id"] == answers["chat"]["id"]


def test_a_streamed_turn_relays_text_deltas_and_ends_completed(answers: dict[str, Any]) -> None:
    events = answers["respond_streamed"]["data"]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") > 1, "the text arrives in pieces"
    assert streamed_text(events) == STREAM_ASKED
    completed = events[-1]["response"]
    assert completed["conversation"]["id"] == answers["chat"]["id"]
    assert completed["output"][0]["content"][0]["text"] == STREAM_ASKED


def test_the_streamed_turn_reached_the_model_after_the_earlier_turn(
    answers: dict[str, Any], fake: FakeLLM
) -> None:
    streamed = [call for call in fake.calls if call.path == RESPONSES_PATH][-1].request
    assert streamed["stream"] is True
    assert [shape(item) for item in streamed["input"]] == [
        ("message", "user", ASKED),
        ("message", "assistant", ASKED),
        ("message", "user", STREAM_ASKED),
    ]


def test_the_conversation_holds_both_turns_in_order(
    answers: dict[str, Any], server_log: Path
) -> None:
    items = answers["chat_items"]["data"]
    assert [shape(item) for item in items] == [
        ("message", "user", ASKED),
        ("message", "assistant", ASKED),
        ("message", "user", STREAM_ASKED),
        ("message", "assistant", STREAM_ASKED),
    ], server_log.read_text(errors="replace")
    assert items[1]["id"] == answers["respond"]["output"][0]["id"]
