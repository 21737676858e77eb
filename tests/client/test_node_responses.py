"""The official `openai` npm package against Precis's stored responses and
`previous_response_id`, on both databases: `responses.create` with no conversation keeps the
response, `responses.retrieve` answers it as created, two turns chained by
`previous_response_id` go on from it (the third answer recalls the first turn's marker),
`responses.inputItems.list` pages a response's own input, `responses.delete` deletes it and a
retrieve after that is the SDK's `NotFoundError`. The server's model is a fake on loopback
(`mode="marker_echo"`: it repeats every `MARKER-...` token of the prompt it gets, so an answer
shows which earlier turns the model got).

The steps run once per database (`tests/client/node/sdk_steps.mjs`, driven by
`run_sdk_steps` of `tests/support/node_openai.py`).

Without `node` on PATH the module is skipped with one line. With `node` installed and CI=true,
Node and the pinned package are required: an unusable Node or a failed install fails the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.client.keyed_server import TENANT_KEY, KeyedService
from tests.support.fake_llm import RESPONSES_PATH, Call, FakeLLM
from tests.support.node_openai import (
    OPENAI_SDK,
    NodeUnavailable,
    node_binary,
    run_sdk_steps,
    skip_or_fail,
)

MODEL = "openai/fake"
OUTPUT_TOKENS = 200
REQUEST_TIMEOUT_MS = 30_000
"""Per request of the Node client: generous for a loaded CI machine."""

FIRST = "MARKER-first Remember this."
SECOND = "MARKER-second And this."
THIRD = "MARKER-third What did I ask you to remember?"
"""The chain's inputs; each marker comes back in every later answer (`marker_echo`)."""

FIRST_ANSWER = "MARKER-first"
SECOND_ANSWER = "MARKER-first\nMARKER-second"
THIRD_ANSWER = "MARKER-first\nMARKER-second\nMARKER-third"


try:  # at collection, so a machine without node skips the module in one line
    node_binary()
except NodeUnavailable as problem:
    skip_or_fail(problem, module_level=True)


@pytest.fixture(scope="module")
def node_ready() -> None:
    """The pinned package, installed on first use (`NodeUnavailable` if it cannot be)."""
    try:
        OPENAI_SDK.package_dir()
    except NodeUnavailable as problem:
        skip_or_fail(problem, module_level=False)


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    return keyed_service.fake_for_module(mode="marker_echo")


@pytest.fixture(scope="module")
def precis_url(node_ready: None, fake: FakeLLM, keyed_service: KeyedService) -> str:
    return keyed_service.url_allowing(MODEL)


def _create(name: str, text: str, previous: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "input": text, "max_output_tokens": OUTPUT_TOKENS}
    if previous is not None:
        body["previous_response_id"] = f"$ref:{previous}.id"
    return {"name": name, "op": "responses.create", "args": [body]}


STEPS: list[dict[str, Any]] = [
    _create("first", FIRST),
    {"name": "retrieved", "op": "responses.retrieve", "args": ["$ref:first.id"]},
    _create("second", SECOND, previous="first"),
    _create("third", THIRD, previous="second"),
    {"name": "third_inputs", "op": "responses.inputItems.list", "args": ["$ref:third.id"]},
    {"name": "first_inputs", "op": "responses.inputItems.list", "args": ["$ref:first.id"]},
    {"name": "deleted", "op": "responses.delete", "args": ["$ref:first.id"]},
    {
        "name": "gone",
        "op": "responses.retrieve",
        "args": ["$ref:first.id"],
        "expect_error": True,
    },
    {"name": "third_kept", "op": "responses.retrieve", "args": ["$ref:third.id"]},
]
"""The chain, its reads and the first response's deletion; each step may name an earlier
step's answer as `"$ref:<step>.<path>"`."""


@dataclass
class Run:
    """What the steps answered, and the model calls they caused."""

    answers: dict[str, Any]
    calls: list[Call]


@pytest.fixture(scope="module")
def chain(fake: FakeLLM, precis_url: str) -> Run:
    before = len(fake.calls)
    answers = run_sdk_steps(
        OPENAI_SDK,
        f"{precis_url}/v1",
        TENANT_KEY,
        STEPS,
        client_options={"maxRetries": 0, "timeout": REQUEST_TIMEOUT_MS},
    )
    return Run(answers, fake.calls[before:])


def _user_texts(call: Call) -> list[str]:
    return [message["content"] for message in call.messages if message["role"] == "user"]


def _input_texts(page: dict[str, Any]) -> list[tuple[str, str]]:
    """An input items list, read whole by the SDK's page iteration: (role, text) per item."""
    return [
        (item["role"], "".join(part["text"] for part in item["content"])) for item in page["data"]
    ]


def test_a_response_is_stored_and_retrieved_as_created(chain: Run) -> None:
    first = chain.answers["first"]
    assert first["id"].startswith("resp_")
    assert (first["status"], first["output_text"]) == ("completed", FIRST_ANSWER)
    assert first["store"] is True
    assert first["previous_response_id"] is None
    assert chain.answers["retrieved"] == first


def test_each_chained_turn_names_its_previous_response(chain: Run) -> None:
    first, second, third = (chain.answers[name] for name in ("first", "second", "third"))
    assert second["previous_response_id"] == first["id"]
    assert third["previous_response_id"] == second["id"]
    assert len({first["id"], second["id"], third["id"]}) == 3
    assert "conversation" not in third or third["conversation"] is None


def test_the_third_answer_recalls_the_first_turn(chain: Run) -> None:
    assert chain.answers["second"]["output_text"] == SECOND_ANSWER
    assert chain.answers["third"]["output_text"] == THIRD_ANSWER


def test_the_model_gets_each_earlier_turn_once(chain: Run) -> None:
    calls = [call for call in chain.calls if call.path == RESPONSES_PATH]
    assert [_user_texts(call) for call in calls] == [
        [FIRST],
        [FIRST, SECOND],
        [FIRST, SECOND, THIRD],
    ]


def test_input_items_are_the_responses_own_input(chain: Run) -> None:
    assert _input_texts(chain.answers["third_inputs"]) == [("user", THIRD)]
    assert _input_texts(chain.answers["first_inputs"]) == [("user", FIRST)]
    [item] = chain.answers["third_inputs"]["data"]
    assert item["id"] and item["type"] == "message"


def test_a_deleted_response_is_not_found(chain: Run) -> None:
    first_id = chain.answers["first"]["id"]
    assert chain.answers["deleted"] == {"id": first_id, "object": "response", "deleted": True}
    error = chain.answers["gone"]["error"]
    assert (error["class"], error["status"]) == ("NotFoundError", 404)
    assert error["body"]["code"] == "response_not_found"
    assert first_id in error["message"]


def test_deleting_a_response_keeps_the_rest_of_its_chain(chain: Run) -> None:
    assert chain.answers["third_kept"] == chain.answers["third"]
