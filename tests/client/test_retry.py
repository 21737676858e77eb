"""Retries and error names, without a server: a real one does not answer 503 or a transient
409 on demand, so these answers come from a loopback `httpx.MockTransport`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from precis_client import (
    AsyncPrecisClient,
    Conflict,
    FormatConflict,
    IdempotencyConflict,
    PrecisClient,
    PrecisError,
    RetryPolicy,
    ServiceUnavailable,
    SessionExists,
    SummarizationInProgress,
    Unauthorized,
)
from precis_client._core import retry_after
from precis_client.errors import error_from

FAST = RetryPolicy(attempts=4, backoff_seconds=0.001, max_delay_seconds=1.0)
SESSION: dict[str, Any] = {
    "id": "s",
    "metadata": {},
    "settings": {},
    "format": None,
    "message_count": 0,
    "summary_count": 0,
    "last_seq": 0,
    "created_at": "t",
    "updated_at": "t",
}

MAX_REQUESTS = 20
"""More requests than any policy here allows: beyond it a test fails instead of hanging."""


def error(status: int, name: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": name, "detail": "d"}, headers=headers)


class Script:
    """Answers the scripted responses in turn (the last one again once they run out) and
    records the requests."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert len(self.requests) <= MAX_REQUESTS, "the client retries without end"
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def sync_client(script: Script, policy: RetryPolicy = FAST) -> PrecisClient:
    return PrecisClient("http://precis.test", retry=policy, transport=httpx.MockTransport(script))


def async_client(script: Script, policy: RetryPolicy = FAST) -> AsyncPrecisClient:
    transport = httpx.MockTransport(script)
    return AsyncPrecisClient("http://precis.test", retry=policy, transport=transport)


@pytest.mark.parametrize(
    "transient",
    [
        error(503, "ServiceUnavailable"),
        error(409, "Conflict"),
        error(409, "ConcurrentChange"),
        error(409, "SummarizationInProgress"),
    ],
    ids=["503", "Conflict", "ConcurrentChange", "SummarizationInProgress"],
)
def test_transient_answers_are_retried_until_one_succeeds(transient: httpx.Response) -> None:
    script = Script(transient, transient, httpx.Response(200, json=SESSION))
    assert sync_client(script).get_session("s") == SESSION
    assert len(script.requests) == 3


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("FormatConflict", FormatConflict),
        ("SessionExists", SessionExists),
        ("IdempotencyConflict", IdempotencyConflict),
    ],
)
def test_other_conflicts_are_raised_at_once(name: str, kind: type[PrecisError]) -> None:
    script = Script(error(409, name), httpx.Response(201, json=SESSION))
    with pytest.raises(kind):
        sync_client(script).create_session("s")
    assert len(script.requests) == 1


async def test_a_pop_that_got_a_503_is_not_sent_again() -> None:
    """The 503 may have come after the pop was stored: a second pop would remove the next
    message too (an Agents SDK rewind would lose an item)."""
    popped = {"message": {"id": 1}}
    script = Script(error(503, "ServiceUnavailable"), httpx.Response(200, json=popped))
    with pytest.raises(ServiceUnavailable):
        sync_client(script).pop_message("s")
    assert len(script.requests) == 1
    script = Script(error(503, "ServiceUnavailable"), httpx.Response(200, json=popped))
    with pytest.raises(ServiceUnavailable):
        await async_client(script).pop_message("s")
    assert len(script.requests) == 1


def test_a_retried_request_is_sent_again_unchanged() -> None:
    script = Script(error(503, "ServiceUnavailable"), httpx.Response(201, json={"messages": []}))
    sync_client(script).append_messages("s", [{"role": "user", "content": "hi", "client_id": "c"}])
    first, second = script.requests
    assert (first.method, first.url, first.content) == (second.method, second.url, second.content)
    assert json.loads(second.content) == {
        "messages": [{"role": "user", "content": "hi", "client_id": "c"}]
    }


def test_the_last_answer_is_raised_when_every_attempt_fails() -> None:
    script = Script(error(503, "ServiceUnavailable"))
    with pytest.raises(ServiceUnavailable) as raised:
        sync_client(script).get_session("s")
    assert len(script.requests) == FAST.attempts
    assert raised.value.status == 503


def test_retry_after_is_honoured() -> None:
    script = Script(
        error(503, "ServiceUnavailable", **{"Retry-After": "0.3"}),
        httpx.Response(200, json=SESSION),
    )
    started = time.monotonic()
    sync_client(script).get_session("s")
    assert time.monotonic() - started >= 0.3  # the backoff alone would be about 1 ms


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=10, backoff_seconds=0.1, max_delay_seconds=1.0)
    for attempt, full in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8)]:
        delays = [policy.delay(attempt, None) for _ in range(50)]
        assert all(full / 2 <= delay <= full for delay in delays), (attempt, delays)
    assert policy.delay(8, None) == 1.0
    assert policy.delay(1, 0.7) == 0.7  # Retry-After is a floor
    assert policy.delay(1, 30.0) == 1.0  # and the cap still holds


async def test_the_async_client_retries_the_same_way() -> None:
    script = Script(
        error(503, "ServiceUnavailable", **{"Retry-After": "0.2"}),
        error(409, "Conflict"),
        httpx.Response(200, json=SESSION),
    )
    started = time.monotonic()
    async with async_client(script) as client:
        assert await client.get_session("s") == SESSION
    assert len(script.requests) == 3
    assert time.monotonic() - started >= 0.2


async def test_the_async_client_raises_other_conflicts_at_once() -> None:
    script = Script(error(409, "FormatConflict"), httpx.Response(201, json={"messages": []}))
    async with async_client(script) as client:
        with pytest.raises(FormatConflict):
            await client.append_items("s", [{"item": {"role": "user", "content": "hi"}}])
    assert len(script.requests) == 1


def test_one_attempt_turns_retries_off() -> None:
    script = Script(error(503, "ServiceUnavailable"), httpx.Response(200, json=SESSION))
    with pytest.raises(ServiceUnavailable):
        sync_client(script, RetryPolicy(attempts=1)).get_session("s")
    assert len(script.requests) == 1


# --- error names (a plain function of an answer) ---------------------------------------------


def answer(status: int, body: Any = None, text: str | None = None) -> httpx.Response:
    request = httpx.Request("GET", "http://precis.test/v1/x")
    if text is not None:
        return httpx.Response(status, text=text, request=request)
    return httpx.Response(status, json=body, request=request)


@pytest.mark.parametrize(
    ("status", "name", "kind"),
    [
        (401, "Unauthorized", Unauthorized),
        (409, "Conflict", Conflict),
        (409, "SummarizationInProgress", SummarizationInProgress),
        (409, "IdempotencyConflict", IdempotencyConflict),
    ],
)
def test_an_error_name_picks_its_class(status: int, name: str, kind: type[PrecisError]) -> None:
    raised = error_from(answer(status, {"error": name, "detail": "why"}))
    assert type(raised) is kind
    assert (raised.status, raised.error, raised.detail) == (status, name, "why")


def test_an_unknown_error_name_gives_the_base_class() -> None:
    raised = error_from(answer(418, {"error": "Teapot", "detail": "short and stout"}))
    assert type(raised) is PrecisError
    assert (raised.status, raised.error, raised.detail) == (418, "Teapot", "short and stout")
    assert str(raised) == "418 Teapot: short and stout"


def test_a_body_that_is_not_precis_json_gives_the_base_class_with_the_text() -> None:
    raised = error_from(answer(502, text="<html>bad gateway</html>"))
    assert type(raised) is PrecisError
    assert (raised.status, raised.error, raised.detail) == (
        502,
        "Bad Gateway",
        "<html>bad gateway</html>",
    )


@pytest.mark.parametrize(
    ("header", "seconds"), [("2", 2.0), ("0.25", 0.25), ("-1", 0.0), ("soon", None), (None, None)]
)
def test_retry_after_reads_seconds(header: str | None, seconds: float | None) -> None:
    headers = {} if header is None else {"Retry-After": header}
    assert retry_after(httpx.Response(503, headers=headers)) == seconds


def test_retry_after_reads_an_http_date() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    seconds = retry_after(httpx.Response(503, headers={"Retry-After": later}))
    assert seconds is not None and 1.5 <= seconds <= 3.0
