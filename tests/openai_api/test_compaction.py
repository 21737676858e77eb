"""`POST /v1/responses/compact` through the official `openai` package: input compacted inline
into a compaction item carrying a Precis summary (nothing stored), a chain compacted into a
stored summary linked to its sources, and the compacted output sent back as the next turn's
input reaching the model as the summary it carries (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from api.compaction_items import COMPACTION_PREFIX, CompactedSummary, compacted_summary
from tests.helpers import said
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


def carried(output: list[Any]) -> CompactedSummary:
    """The one compaction item of `output`, decoded."""
    [item] = [one.model_dump() for one in output if one.type == "compaction"]
    assert item["id"].startswith("cmp_")
    assert item["encrypted_content"].startswith(COMPACTION_PREFIX)
    summary = compacted_summary(item)
    assert summary is not None
    return summary


async def session_count(api: httpx.AsyncClient) -> int:
    return len((await api.get("/v1/sessions", params={"limit": 1000})).json()["sessions"])


async def test_input_is_compacted_inline_and_nothing_is_stored(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    before = await session_count(api)
    compacted = await client.responses.compact(
        model=MODEL,
        input=[
            said("My parcel MARKER-parcel is late."),
            said("I will look into MARKER-lookup.", "assistant"),
            said("Thanks, MARKER-thanks."),
        ],
    )
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    summary = carried(compacted.output)
    assert "MARKER-parcel" in summary.text and "MARKER-lookup" in summary.text
    assert summary.summary_ids == ()  # nothing stored
    assert compacted.output[0].type == "compaction"
    assert compacted.usage.output_tokens > 0
    assert await session_count(api) == before


async def test_the_compacted_output_sent_back_reaches_the_model_as_its_summary(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    compacted = await client.responses.compact(
        model=MODEL,
        input=[said("Remember MARKER-kept."), said("Noted.", "assistant"), said("Good.")],
    )
    carried_on: list[Any] = [item.model_dump(exclude_none=True) for item in compacted.output]
    answer = await client.responses.create(
        model=MODEL, input=[*carried_on, said("And MARKER-next?")]
    )
    assert "MARKER-kept" in answer.output_text and "MARKER-next" in answer.output_text
    sent = upstream.calls[-1].request["input"]
    assert all(item.get("type") != "compaction" for item in sent)
    assert any("Summary of earlier conversation" in str(item.get("content")) for item in sent)


async def test_a_chain_is_compacted_into_a_stored_summary_linked_to_its_sources(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    first = await client.responses.create(model=MODEL, input="MARKER-first question")
    second = await client.responses.create(
        model=MODEL, input="MARKER-second question", previous_response_id=first.id
    )
    compacted = await client.responses.compact(model=MODEL, previous_response_id=second.id)
    summary = carried(compacted.output)
    assert "MARKER-first" in summary.text and "MARKER-second" in summary.text
    stored = (await api.get(f"/v1/sessions/{first.id}/summaries")).json()["summaries"]
    assert [one["id"] for one in stored] == list(summary.summary_ids)
    assert (stored[0]["first_seq"], summary.first_seq) == (1, 1)
    assert stored[-1]["last_seq"] == summary.last_seq == 4  # both turns, input and answer
    # the chain goes on from the compacted context: the summary, then the new input
    third = await client.responses.create(
        model=MODEL, input="MARKER-third", previous_response_id=second.id
    )
    assert "MARKER-first" in third.output_text and "MARKER-third" in third.output_text
    sent = upstream.calls[-1].request["input"]
    assert len(sent) == 2 and str(sent[0]["content"]).startswith("Summary of earlier conversation")


async def test_a_chain_with_new_input_is_refused_and_an_unknown_chain_is_not_found(
    client: AsyncOpenAI,
) -> None:
    first = await client.responses.create(model=MODEL, input="MARKER-only")
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.compact(
            model=MODEL, previous_response_id=first.id, input="more to say"
        )
    assert refused.value.body["param"] == "input"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.compact(model=MODEL, previous_response_id="resp_unknown")
    assert "resp_unknown" in missing.value.message
    with pytest.raises(openai.BadRequestError):
        await client.responses.compact(model="openai/not-allowed", input="hi")
    # a response continued since: its session holds another branch's turns
    await client.responses.create(model=MODEL, input="MARKER-later", previous_response_id=first.id)
    with pytest.raises(openai.BadRequestError) as continued:
        await client.responses.compact(model=MODEL, previous_response_id=first.id)
    assert "continued since" in continued.value.message


async def test_a_compaction_item_precis_did_not_make_passes_through_untouched(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    foreign: Any = {"type": "compaction", "id": "cmp_theirs", "encrypted_content": "gAAAAB-opaque"}
    await client.responses.create(model=MODEL, input=[foreign, said("MARKER-hello")])
    sent = upstream.calls[-1].request["input"]
    assert foreign in sent


async def compacted_items(client: AsyncOpenAI, text: str) -> list[Any]:
    compacted = await client.responses.compact(
        model=MODEL, input=[said(text), said("Noted.", "assistant"), said("Fine.")]
    )
    return [item.model_dump(exclude_none=True) for item in compacted.output]


@pytest.mark.parametrize("stream", [False, True])
async def test_without_store_the_compaction_item_reaches_the_model_as_its_summary(
    client: AsyncOpenAI, upstream: FakeLLM, stream: bool
) -> None:
    carried_on = await compacted_items(client, "Remember MARKER-stateless.")
    created = await client.responses.create(
        model=MODEL, input=[*carried_on, said("And now?")], store=False, stream=stream
    )
    if stream:
        async for _event in created:  # type: ignore[union-attr]
            pass
    sent = upstream.calls[-1].request["input"]
    assert all(item.get("type") != "compaction" for item in sent)
    assert "MARKER-stateless" in str(sent[0]["content"])


async def test_a_chain_holding_a_compaction_item_is_counted_as_its_summary(
    client: AsyncOpenAI,
) -> None:
    carried_on = await compacted_items(client, "Remember MARKER-counted.")
    started = await client.responses.create(model=MODEL, input=[*carried_on, said("Go on.")])
    counted = await client.responses.input_tokens.count(
        model=MODEL, previous_response_id=started.id, input="next"
    )
    assert counted.input_tokens > 0


@pytest.mark.parametrize(
    "carried",
    [
        "[" * 2_000 + "]" * 2_000,  # deeper than any stored value may be
        '{"text": "a\\u0000b", "first_seq": 1, "last_seq": 2, "summary_ids": []}',  # NUL
    ],
    ids=["nested", "nul"],
)
async def test_content_that_only_looks_like_precis_passes_through_as_another_item(
    client: AsyncOpenAI, upstream: FakeLLM, carried: str
) -> None:
    content = COMPACTION_PREFIX + base64.urlsafe_b64encode(carried.encode()).decode()
    item: Any = {"type": "compaction", "id": "cmp_odd", "encrypted_content": content}
    await client.responses.create(model=MODEL, input=[item, said("MARKER-hi")], store=False)
    assert item in upstream.calls[-1].request["input"]


async def test_a_count_for_a_model_is_of_the_context_fitted_to_its_window(
    client: AsyncOpenAI,
) -> None:
    """A conversation longer than the window: counted for the model, what a turn would send
    (within the window); counted without one, the context as it loads."""
    words = " ".join(f"word{n}" for n in range(300))
    items = [said(f"MARKER-{n} {words}") for n in range(20)]
    conversation = await client.conversations.create(items=items)
    for_the_model = await client.responses.input_tokens.count(
        model=MODEL, conversation=conversation.id, input="next"
    )
    as_it_loads = await client.responses.input_tokens.count(
        conversation=conversation.id, input="next"
    )
    untruncated = await client.responses.input_tokens.count(
        model=MODEL,
        conversation=conversation.id,
        input="next",
        extra_body={"truncation": "disabled"},
    )
    assert as_it_loads.input_tokens > 3 * WINDOW
    assert 0 < for_the_model.input_tokens <= WINDOW
    assert untruncated.input_tokens > 3 * WINDOW, "a turn that may not summarize sends it all"
