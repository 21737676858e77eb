"""Context editing: old tool results, their calls' arguments and old image and file parts load as
placeholders, a view that stores nothing, counts in every budget and trigger, and is undone by
a setting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import (
    append,
    append_items,
    assert_tool_pairs_valid,
    history,
    user,
)

RESULT_FACTS = 100
"""Facts in each tool result: about 500 tokens, far above a placeholder's."""

CLEARING = {
    "clear_tool_results_trigger_tokens": 1_000,
    "clear_tool_results_keep": 2,
}


def call(call_id: str, tool: str = "search", arguments: str = '{"q": "lyon weather"}') -> Any:
    function = {"name": tool, "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str) -> dict[str, Any]:
    body = " ".join(f"{call_id}-fact-{n}" for n in range(RESULT_FACTS))
    return {"role": "tool", "tool_call_id": call_id, "content": body}


async def agent_session(
    api: httpx.AsyncClient,
    sid: str,
    turns: int,
    settings: dict[str, Any] | None = None,
    **tools: str,
) -> list[int]:
    """A session of `turns` exchanges (question, call, result); the results' message ids."""
    created = await api.post("/v1/sessions", json={"id": sid, "settings": settings or {}})
    assert created.status_code == 201, created.text
    result_ids = []
    for turn in range(turns):
        call_id = f"call_{turn}"
        stored = await append(
            api,
            sid,
            user(f"question {turn}"),
            call(call_id, tools.get(call_id, "search")),
            result(call_id),
        )
        result_ids.append(stored["messages"][-1]["id"])
    return result_ids


def tool_contents(context: list[dict[str, Any]]) -> list[str]:
    return [message["content"] for message in context if message["role"] == "tool"]


async def test_off_by_default_nothing_is_cleared(api: httpx.AsyncClient, sid: str) -> None:
    await agent_session(api, sid, 6)
    loaded = await history(api, sid)
    assert loaded["cleared"] == []
    assert all("-fact-" in content for content in tool_contents(loaded["context"]))


async def test_past_the_trigger_old_results_load_as_placeholders_naming_the_message(
    api: httpx.AsyncClient, sid: str
) -> None:
    result_ids = await agent_session(api, sid, 6, CLEARING)
    loaded = await history(api, sid)
    contents = tool_contents(loaded["context"])
    assert len(contents) == 6  # every result keeps its place and its pairing
    assert_tool_pairs_valid(loaded["context"])
    cleared_ids = [part["id"] for part in loaded["cleared"]]
    assert cleared_ids == result_ids[:4]  # all but the newest two
    assert {part["kind"] for part in loaded["cleared"]} == {"tool_result"}
    for content, message_id in zip(contents[:4], result_ids[:4], strict=True):
        assert content.startswith("[Result of search cleared from the context")
        assert f"message {message_id} (seq " in content
        assert "-fact-" not in content
    assert all("-fact-" in content for content in contents[4:])
    # the store keeps every result as appended
    stored = (await api.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert [m["content"] for m in stored if m["role"] == "tool"] == [
        result(f"call_{turn}")["content"] for turn in range(6)
    ]


async def test_the_token_estimate_counts_the_cleared_view(api: httpx.AsyncClient, sid: str) -> None:
    await agent_session(api, sid, 6, CLEARING)
    cleared = await history(api, sid)
    raw = await history(api, sid, clear_tool_results_trigger_tokens=0)
    assert raw["cleared"] == []
    saved = sum(part["tokens"] for part in cleared["cleared"])
    assert saved > 4 * 200
    assert cleared["token_estimate"] == raw["token_estimate"] - saved


async def test_under_the_trigger_nothing_is_cleared(api: httpx.AsyncClient, sid: str) -> None:
    await agent_session(api, sid, 2, CLEARING)  # about 700 tokens, under 1,000
    assert (await history(api, sid))["cleared"] == []


async def test_results_of_excluded_tools_are_never_cleared(
    api: httpx.AsyncClient, sid: str
) -> None:
    settings = {**CLEARING, "clear_tool_results_exclude_tools": ["read_file"]}
    result_ids = await agent_session(api, sid, 6, settings, call_1="read_file")
    cleared = [part["id"] for part in (await history(api, sid))["cleared"]]
    assert cleared == [result_ids[0], result_ids[2], result_ids[3]]


async def test_a_request_overrides_the_session_s_setting(api: httpx.AsyncClient, sid: str) -> None:
    result_ids = await agent_session(api, sid, 6)
    loaded = await history(
        api,
        sid,
        clear_tool_results_trigger_tokens=500,
        clear_tool_results_keep=1,
        clear_tool_results_exclude_tools=["other", "search2"],
    )
    assert [part["id"] for part in loaded["cleared"]] == result_ids[:5]
    again = await history(api, sid, clear_tool_results_trigger_tokens=0)
    assert again["cleared"] == []


async def test_the_cleared_part_grows_in_steps_of_at_least_the_tokens_asked(
    api: httpx.AsyncClient, sid: str
) -> None:
    """With `at_least` about two results' worth, results are cleared two at a time: a new
    exchange moves the cleared prefix only when a whole step is due."""
    settings = {**CLEARING, "clear_tool_results_keep": 1, "clear_tool_results_at_least_tokens": 800}
    result_ids = await agent_session(api, sid, 4, settings)
    first = [part["id"] for part in (await history(api, sid))["cleared"]]
    assert first == result_ids[:2]  # three candidates: one whole step of two
    await append(api, sid, user("question 4"), call("call_4"), result("call_4"))
    second = [part["id"] for part in (await history(api, sid))["cleared"]]
    assert second == [*first, result_ids[2], result_ids[3]]


async def test_clearing_inputs_clears_the_arguments_of_calls_whose_result_went(
    api: httpx.AsyncClient, sid: str
) -> None:
    settings = {**CLEARING, "clear_tool_inputs": True}
    await agent_session(api, sid, 4, settings)
    loaded = await history(api, sid)
    calls = [m["tool_calls"][0] for m in loaded["context"] if m.get("tool_calls")]
    assert [c["function"]["arguments"].startswith('{"cleared"') for c in calls] == [
        True,
        True,
        False,
        False,
    ]
    assert {part["kind"] for part in loaded["cleared"]} == {"tool_result", "tool_input"}
    assert_tool_pairs_valid(loaded["context"])


async def test_a_budget_that_the_cleared_view_fits_truncates_nothing(
    api: httpx.AsyncClient, sid: str
) -> None:
    await agent_session(api, sid, 8, CLEARING)
    raw = await history(api, sid, clear_tool_results_trigger_tokens=0)
    cleared = await history(api, sid)
    budget = cleared["token_estimate"] + 10
    assert raw["token_estimate"] > budget
    fitted = await history(api, sid, max_tokens=budget)
    assert fitted["truncated_messages"] == 0
    assert fitted["context"] == cleared["context"]
    raw_fitted = await history(api, sid, max_tokens=budget, clear_tool_results_trigger_tokens=0)
    assert raw_fitted["truncated_messages"] > 0


async def test_responses_items_are_cleared_as_items(api: httpx.AsyncClient, sid: str) -> None:
    items: list[dict[str, Any]] = []
    for turn in range(5):
        call_id = f"fc_{turn}"
        items += [
            {"type": "message", "role": "user", "content": f"question {turn}"},
            {"type": "function_call", "call_id": call_id, "name": "search", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": result(call_id)["content"],
            },
        ]
    created = await api.post(
        "/v1/sessions", json={"id": sid, "settings": CLEARING, "format": "responses"}
    )
    assert created.status_code == 201, created.text
    stored = (await append_items(api, sid, *items))["messages"]
    loaded = await history(api, sid)
    outputs = [i for i in loaded["context"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [f"fc_{turn}" for turn in range(5)]
    assert [o["output"].startswith("[Result of search cleared") for o in outputs] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert [part["id"] for part in loaded["cleared"]] == [stored[i]["id"] for i in (2, 5, 8)]


async def test_a_chat_session_loaded_as_items_is_cleared_too(
    api: httpx.AsyncClient, sid: str
) -> None:
    await agent_session(api, sid, 4, CLEARING)
    loaded = await history(api, sid, format="responses")
    outputs = [i["output"] for i in loaded["context"] if i.get("type") == "function_call_output"]
    assert [text.startswith("[Result of search cleared") for text in outputs] == [
        True,
        True,
        False,
        False,
    ]


IMAGE = "data:image/png;base64," + "iVBORw0KGgo" + "A" * 400


def with_image(text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
        ],
    }


async def test_images_older_than_the_newest_n_load_as_placeholders(
    api: httpx.AsyncClient, sid: str
) -> None:
    created = await api.post(
        "/v1/sessions", json={"id": sid, "settings": {"clear_file_parts_keep": 1}}
    )
    assert created.status_code == 201, created.text
    stored = (await append(api, sid, with_image("first"), with_image("second")))["messages"]
    loaded = await history(api, sid)
    first, second = loaded["context"]
    assert first["content"][0] == {"type": "text", "text": "first"}
    placeholder = first["content"][1]
    assert placeholder["type"] == "text"
    assert placeholder["text"].startswith("[Image cleared from the context: image/png")
    assert f"message {stored[0]['id']} (seq 1)" in placeholder["text"]
    assert second["content"][1]["type"] == "image_url"
    assert [(part["id"], part["kind"]) for part in loaded["cleared"]] == [
        (stored[0]["id"], "file_part")
    ]
    items = await history(api, sid, format="responses")
    assert items["context"][0]["content"][1]["type"] == "input_text"
    assert items["context"][1]["content"][1]["type"] == "input_image"
    stored_again = (await api.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert stored_again[0]["content"][1]["image_url"]["url"] == IMAGE


@pytest.mark.parametrize(
    "params",
    [
        {"clear_tool_results_keep": -1},
        {"clear_tool_results_trigger_tokens": "many"},
        {"clear_file_parts_keep": -2},
        {"clear_tool_inputs": "perhaps"},
    ],
)
async def test_a_bad_override_is_422_naming_it(
    api: httpx.AsyncClient, sid: str, params: dict[str, Any]
) -> None:
    await agent_session(api, sid, 1)
    answer = await api.get(f"/v1/sessions/{sid}/history", params=params)
    assert answer.status_code == 422
    assert next(iter(params)) in answer.text


@pytest.mark.parametrize(
    "settings",
    [
        {"clear_tool_results_exclude_tools": "search"},
        {"clear_tool_results_exclude_tools": ["bad\u0000name"]},
        {"clear_tool_results_keep": -1},
        {"clear_file_parts_keep": True},
    ],
)
async def test_bad_settings_are_422_and_store_nothing(
    api: httpx.AsyncClient, sid: str, settings: dict[str, Any]
) -> None:
    answer = await api.post("/v1/sessions", json={"id": sid, "settings": settings})
    assert answer.status_code == 422, answer.text
    assert next(iter(settings)) in answer.text
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_outputs_with_a_shape_of_their_own_are_never_cleared(
    api: httpx.AsyncClient, sid: str
) -> None:
    """A computer call's output is a screenshot object: no text may stand for it."""
    screenshot = {"type": "computer_screenshot", "image_url": "https://example.com/s.png"}
    items: list[dict[str, Any]] = []
    for turn in range(4):
        items += [
            {"type": "message", "role": "user", "content": result(f"c{turn}")["content"]},
            {"type": "computer_call", "call_id": f"c{turn}", "action": {"type": "screenshot"}},
            {"type": "computer_call_output", "call_id": f"c{turn}", "output": screenshot},
        ]
    settings = {"clear_tool_results_trigger_tokens": 100, "clear_tool_results_keep": 0}
    created = await api.post(
        "/v1/sessions", json={"id": sid, "settings": settings, "format": "responses"}
    )
    assert created.status_code == 201, created.text
    await append_items(api, sid, *items)
    loaded = await history(api, sid)
    assert loaded["cleared"] == []
    outputs = [i for i in loaded["context"] if i.get("type") == "computer_call_output"]
    assert [o["output"] for o in outputs] == [screenshot] * 4
