"""A background response followed as a stream over a real connection, with the official
`openai` package: its first events arrive while the worker still runs it, the client drops the
stream, and `responses.retrieve(id, stream=True, starting_after=N)` goes on from the event after
the last one it read, on both databases (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

from openai import OpenAI
from openai.types.responses import ResponseCompletedEvent

from tests.client.keyed_server import TENANT_KEY, KeyedService

MODEL = "openai/fake"
MODEL_SECONDS = 2.0
"""How long the model takes: the first events are read, and the stream dropped, well before."""


def test_a_dropped_background_stream_resumes_after_its_last_event(
    keyed_service: KeyedService,
) -> None:
    fake = keyed_service.fake_for_module(mode="marker_echo")
    client = OpenAI(
        base_url=f"{keyed_service.url_allowing(MODEL)}/v1",
        api_key=TENANT_KEY,
        max_retries=0,
        timeout=30.0,
    )
    fake.slow_next(MODEL_SECONDS)
    stream = client.responses.create(
        model=MODEL, input="MARKER-followed hello", background=True, stream=True
    )
    read = []
    for event in stream:
        read.append(event)
        if event.type == "response.queued":
            break
    stream.close()

    response_id = read[0].response.id  # type: ignore[union-attr]
    assert [event.type for event in read] == ["response.created", "response.queued"]
    assert client.responses.retrieve(response_id).status in ("queued", "in_progress")

    resumed = client.responses.retrieve(
        response_id, stream=True, starting_after=read[-1].sequence_number
    )
    rest = list(resumed)
    assert rest[0].type == "response.in_progress" and rest[0].sequence_number == 2
    assert [event.sequence_number for event in rest] == list(range(2, 2 + len(rest)))
    assert isinstance(rest[-1], ResponseCompletedEvent)
    assert rest[-1].response.output_text == "MARKER-followed"
    assert client.responses.retrieve(response_id).output_text == "MARKER-followed"
