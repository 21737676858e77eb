"""Hardening: the key rule on every path, keys never logged, metadata limits, odd input.

Complements tests/test_auth.py and tests/test_validation.py: what is checked here is the
gate in front of the app (a client without a key learns nothing, not even a parse error),
the routes outside /v1, and bad input outside the message batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from api.json_values import MAX_JSON_DEPTH
from api.main import create_app
from tests.conftest import make_settings
from tests.support.fake_llm import FakeLLM

KEY_A = "sekret-A-6f1d9c"
KEY_B = "sekret-B-0b7e44"
KEYS = f"tenant_a:{KEY_A},tenant_b:{KEY_B}"
A = {"Authorization": f"Bearer {KEY_A}"}
METADATA_LIMIT = 1_000


SETTINGS: dict[str, Any] = {
    "api_keys": KEYS,
    "dynamic_summary_enabled": False,
    "summary_workers": 0,
    "max_metadata_bytes": METADATA_LIMIT,
}
"""Most tests share the module's `api` app (conftest) with these settings, each on its `sid`."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return dict(SETTINGS)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(SETTINGS)


def user(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assert_error(answer: httpx.Response, status: int, *names: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error", "detail"}, body
    if status == 422:  # body, query and path problems alike
        assert body["error"] == "ValidationFailed", body
    for name in names:
        assert name in body["detail"], body["detail"]


async def tenant_session_count(api: httpx.AsyncClient) -> int:
    answer = await api.get("/v1/sessions", params={"limit": 1000}, headers=A)
    return len(answer.json()["sessions"])


async def assert_absent(api: httpx.AsyncClient, session_id: str) -> None:
    assert (await api.get(f"/v1/sessions/{session_id}", headers=A)).status_code == 404


@pytest.fixture
async def loopback_less(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A development-mode app (no keys) reached from a non-loopback address."""
    app = create_app(make_settings(database_url, dynamic_summary_enabled=False, summary_workers=0))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 4321))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        yield http


# --- the key rule ---------------------------------------------------------------------------

NEEDS_A_KEY = [
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("POST", "/v1/sessions/s/compact"),
    ("GET", "/v1/sessions/s/summaries"),
    ("GET", "/v1/summaries/1"),
    ("GET", "/v1/no-such-route"),
    ("PUT", "/v1/sessions/s"),
]


@pytest.mark.parametrize(("method", "path"), NEEDS_A_KEY, ids=[" ".join(r) for r in NEEDS_A_KEY])
async def test_every_path_but_the_probes_needs_a_key(
    api: httpx.AsyncClient, method: str, path: str
) -> None:
    answer = await api.request(method, path)
    assert_error(answer, 401, "API key")
    assert answer.headers["www-authenticate"] == "Bearer"


async def test_metrics_are_served_with_a_key(api: httpx.AsyncClient) -> None:
    answer = await api.get("/metrics", headers=A)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert "precis_summaries_total" in answer.text


async def test_readyz_needs_no_key(api: httpx.AsyncClient) -> None:
    answer = await api.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


async def test_the_key_is_checked_before_the_body_is_parsed(api: httpx.AsyncClient) -> None:
    answer = await api.post(
        "/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_error(answer, 401)


@pytest.mark.parametrize("settings_overrides", [{"api_keys": KEYS, "max_request_bytes": 100}])
async def test_the_key_is_checked_before_the_body_size(client: httpx.AsyncClient) -> None:
    big = {"messages": [user("x" * 1_000)]}
    assert_error(await client.post("/v1/sessions/s/messages", json=big), 401)
    assert_error(await client.post("/v1/sessions/s/messages", json=big, headers=A), 413)


async def test_the_openapi_document_declares_the_bearer_key_on_every_route_but_the_probes(
    api: httpx.AsyncClient,
) -> None:
    document = (await api.get("/openapi.json", headers=A)).json()
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            secured = "security" in operation
            assert secured == (path not in ("/healthz", "/readyz")), f"{method} {path}"


async def test_without_keys_metrics_and_docs_are_refused_to_non_loopback_clients(
    loopback_less: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="precis.auth")
    for path in ("/metrics", "/openapi.json", "/v1/sessions"):
        assert_error(await loopback_less.get(path), 403, "loopback")
    assert "203.0.113.9" in caplog.text and "no API_KEYS" in caplog.text


async def test_without_keys_the_probes_answer_non_loopback_clients(
    loopback_less: httpx.AsyncClient,
) -> None:
    assert (await loopback_less.get("/healthz")).status_code == 200
    assert (await loopback_less.get("/readyz")).status_code == 200


async def test_api_keys_are_never_logged(
    api: httpx.AsyncClient, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    near_miss = KEY_A[:-1] + "X"
    for headers in (A, {"Authorization": f"Bearer {near_miss}"}, {"Authorization": KEY_B}):
        await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [user()]}, headers=headers)
        await api.get(f"/v1/sessions/{sid}/history", headers=headers)
        await api.get("/metrics", headers=headers)
    logged = "\n".join(f"{record.getMessage()} {record.args!r}" for record in caplog.records)
    for secret in (KEY_A, KEY_B, near_miss):
        assert secret not in logged
        assert secret not in caplog.text


def test_settings_never_show_the_keys_in_their_repr(database_url: str) -> None:
    settings = make_settings(database_url, api_keys=KEYS, summary_api_key="sk-llm-secret")
    shown = f"{settings!r} {settings}"
    assert KEY_A not in shown and "sk-llm-secret" not in shown


# --- metadata limits ------------------------------------------------------------------------


def metadata_of_size(size: int) -> dict[str, Any]:
    """A metadata object whose JSON encoding is exactly `size` bytes (multi-byte text)."""
    overhead = len(json.dumps({"k": ""}, ensure_ascii=False).encode())
    body = "é" * ((size - overhead) // 2) + "x" * ((size - overhead) % 2)
    metadata = {"k": body}
    assert len(json.dumps(metadata, ensure_ascii=False).encode()) == size
    return metadata


async def test_session_metadata_at_the_limit_is_accepted(api: httpx.AsyncClient, sid: str) -> None:
    body = {"id": sid, "metadata": metadata_of_size(METADATA_LIMIT)}
    assert (await api.post("/v1/sessions", json=body, headers=A)).status_code == 201


async def test_session_metadata_over_the_limit_gets_413_and_creates_nothing(
    api: httpx.AsyncClient, sid: str
) -> None:
    body = {"id": sid, "metadata": metadata_of_size(METADATA_LIMIT + 1)}
    answer = await api.post("/v1/sessions", json=body, headers=A)
    assert_error(answer, 413, "metadata", str(METADATA_LIMIT))
    await assert_absent(api, sid)


async def test_patched_metadata_over_the_limit_gets_413_and_changes_nothing(
    api: httpx.AsyncClient, sid: str
) -> None:
    await api.post("/v1/sessions", json={"id": sid, "metadata": {"kept": 1}}, headers=A)
    answer = await api.patch(
        f"/v1/sessions/{sid}", json={"metadata": metadata_of_size(METADATA_LIMIT + 1)}, headers=A
    )
    assert_error(answer, 413, "metadata")
    assert (await api.get(f"/v1/sessions/{sid}", headers=A)).json()["metadata"] == {"kept": 1}


async def test_message_metadata_over_the_limit_gets_413_and_stores_nothing_of_the_batch(
    api: httpx.AsyncClient, sid: str
) -> None:
    batch = [user("fine"), user("too much", metadata=metadata_of_size(METADATA_LIMIT + 1))]
    answer = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": batch}, headers=A)
    assert_error(answer, 413, "messages[1].metadata")
    await assert_absent(api, sid)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_session_metadata_nested_too_deep_gets_422(api: httpx.AsyncClient, sid: str) -> None:
    answer = await api.post("/v1/sessions", json={"id": sid, "metadata": nested(20)}, headers=A)
    assert_error(answer, 422, "metadata", "nested deeper")
    await assert_absent(api, sid)


async def test_metadata_has_one_depth_limit_on_sessions_and_messages(
    api: httpx.AsyncClient, sid: str
) -> None:
    deepest, too_deep = nested(MAX_JSON_DEPTH - 1), nested(MAX_JSON_DEPTH)
    session = await api.post("/v1/sessions", json={"id": sid, "metadata": deepest}, headers=A)
    assert session.status_code == 201, session.text
    url = f"/v1/sessions/{sid}/messages"
    message = await api.post(url, json={"messages": [user("x", metadata=deepest)]}, headers=A)
    assert message.status_code == 201, message.text

    refused = await api.post(
        "/v1/sessions", json={"id": f"{sid}-b", "metadata": too_deep}, headers=A
    )
    assert_error(refused, 422, "nested deeper")
    refused = await api.post(url, json={"messages": [user("y", metadata=too_deep)]}, headers=A)
    assert_error(refused, 422, "nested deeper")


async def test_session_metadata_nested_within_the_limit_is_accepted(
    api: httpx.AsyncClient, sid: str
) -> None:
    answer = await api.post("/v1/sessions", json={"id": sid, "metadata": nested(12)}, headers=A)
    assert answer.status_code == 201, answer.text


# --- bodies that do not parse ---------------------------------------------------------------


async def post_raw(client: httpx.AsyncClient, url: str, body: bytes) -> httpx.Response:
    headers = {**A, "content-type": "application/json"}
    return await client.post(url, content=body, headers=headers)


async def test_json_nested_beyond_the_parser_gets_422_saying_so(
    api: httpx.AsyncClient, sid: str
) -> None:
    body = f'{{"id": "{sid}", "metadata": '.encode() + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "nested too deeply")
    await assert_absent(api, sid)


async def test_a_number_with_too_many_digits_gets_422_saying_so(
    api: httpx.AsyncClient, sid: str
) -> None:
    body = f'{{"id": "{sid}", "metadata": {{"n": '.encode() + b"9" * 5_000 + b"}}"
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "digits")
    await assert_absent(api, sid)


async def test_a_body_that_is_not_utf8_gets_422_saying_so(api: httpx.AsyncClient) -> None:
    assert_error(await post_raw(api, "/v1/sessions", b'{"id": "\xff"}'), 422, "UTF-8")


async def test_a_405_lists_every_method_of_the_path(api: httpx.AsyncClient) -> None:
    answer = await api.put("/v1/sessions", headers=A)
    assert_error(answer, 405)
    assert answer.headers["allow"] == "GET, POST"


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/sessions/{sid}/history", {"max_token": "100"}),
        ("/v1/sessions", {"": "x"}),
        ("/v1/sessions/{sid}/messages", {"after": "3"}),
    ],
    ids=["typo", "empty name", "after"],
)
async def test_an_unknown_query_parameter_gets_422_naming_it(
    api: httpx.AsyncClient, sid: str, path: str, params: dict[str, str]
) -> None:
    await api.post("/v1/sessions", json={"id": sid}, headers=A)
    name = next(iter(params))
    answer = await api.get(path.format(sid=sid), params=params, headers=A)
    assert_error(answer, 422, f"query.{name}")


async def test_malformed_json_names_where_it_breaks(api: httpx.AsyncClient) -> None:
    answer = await post_raw(api, "/v1/sessions/s/messages", b'{"messages": [}')
    assert_error(answer, 422, "invalid JSON at character 14")


@pytest.mark.parametrize("body", [b"[]", b"null", b'"text"', b"42"])
async def test_a_body_that_is_not_an_object_gets_422(api: httpx.AsyncClient, body: bytes) -> None:
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "body")


async def test_a_streamed_body_over_the_limit_gets_413(database_url: str) -> None:
    """Without Content-Length the limit applies while the body streams in."""
    app = create_app(make_settings(database_url, max_request_bytes=1_000, summary_workers=0))

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        answer = await http.post(
            "/v1/sessions/streamed/messages",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert_error(answer, 413, "1000 bytes")
        assert (await http.get("/v1/sessions/streamed")).status_code == 404


# --- wrong types anywhere -------------------------------------------------------------------

NEW = "{new}"
"""Stands for a session id no request may create."""

WRONG_TYPES: dict[str, tuple[str, str, Any, str]] = {
    "settings int as a string": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"message_limit": "12"}},
        "message_limit",
    ),
    "settings int as a bool": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"keep_last_n": True}},
        "keep_last_n",
    ),
    "settings bool as an int": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"bisect_enabled": 1}},
        "bisect_enabled",
    ),
    "settings int as a float": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"summary_limit": 2.5}},
        "summary_limit",
    ),
    "settings unknown key": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"api_base": "http://evil.example"}},
        "api_base",
    ),
    "settings model with a control character": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"model": "gpt\n4"}},
        "model",
    ),
    "settings number out of range": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"message_limit": 10**30}},
        "message_limit",
    ),
    "session id a number": ("POST", "/v1/sessions", {"id": 7}, "id"),
    "session metadata a list": ("POST", "/v1/sessions", {"id": NEW, "metadata": [1]}, "metadata"),
    "messages an object": (
        "POST",
        "/v1/sessions/{new}/messages",
        {"messages": {"role": "user"}},
        "messages",
    ),
    "client_id a number": (
        "POST",
        "/v1/sessions/{new}/messages",
        {"messages": [user(client_id=5)]},
        "client_id",
    ),
    "compact trigger unknown": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"trigger": "auto"},
        "trigger",
    ),
    "compact keep_last_n a string": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"keep_last_n": "3"},
        "keep_last_n",
    ),
    "compact keep_last_n negative": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"keep_last_n": -1},
        "keep_last_n",
    ),
    "patch metadata a string": ("PATCH", "/v1/sessions/{sid}", {"metadata": "x"}, "metadata"),
    "patch settings a list": ("PATCH", "/v1/sessions/{sid}", {"settings": []}, "settings"),
}


@pytest.mark.parametrize(
    ("method", "path", "body", "field"), WRONG_TYPES.values(), ids=list(WRONG_TYPES)
)
async def test_a_wrong_type_anywhere_gets_422_naming_the_field_and_stores_nothing(
    api: httpx.AsyncClient, sid: str, method: str, path: str, body: Any, field: str
) -> None:
    new = f"{sid}-new"
    if isinstance(body, dict) and body.get("id") == NEW:
        body = {**body, "id": new}
    await api.post("/v1/sessions", json={"id": sid, "metadata": {"kept": 1}}, headers=A)
    answer = await api.request(method, path.format(sid=sid, new=new), json=body, headers=A)
    assert_error(answer, 422, field)
    await assert_absent(api, new)
    session = (await api.get(f"/v1/sessions/{sid}", headers=A)).json()
    assert (session["metadata"], session["settings"], session["last_seq"]) == ({"kept": 1}, {}, 0)


# --- odd path ids and query parameters ------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["abc", "-1", "0", "1.5", "1e3", str(2**64), "%00"])
async def test_an_odd_summary_id_gets_422_naming_it(api: httpx.AsyncClient, bad_id: str) -> None:
    assert_error(await api.get(f"/v1/summaries/{bad_id}", headers=A), 422, "summary_id")


@pytest.mark.parametrize("bad_id", ["%00", "a%2Fb", "%F0%9F%98%80", "x" * 129])
async def test_an_odd_session_id_on_compact_gets_a_4xx_and_stores_nothing(
    api: httpx.AsyncClient, bad_id: str
) -> None:
    before = await tenant_session_count(api)
    answer = await api.post(f"/v1/sessions/{bad_id}/compact", json={}, headers=A)
    assert answer.status_code in (404, 422), answer.text
    assert set(answer.json()) == {"error", "detail"}
    assert await tenant_session_count(api) == before


@pytest.mark.parametrize("dots", [".", ".."])
async def test_a_dot_segment_session_id_is_refused_at_create(
    api: httpx.AsyncClient, dots: str
) -> None:
    """Clients resolve `.` and `..` in a URL path: such a session could never be addressed."""
    before = await tenant_session_count(api)
    assert_error(await api.post("/v1/sessions", json={"id": dots}, headers=A), 422, "id")
    assert await tenant_session_count(api) == before


async def test_ids_with_dots_that_are_not_dot_segments_are_accepted(
    api: httpx.AsyncClient,
) -> None:
    for session in ("...", ".a", "a.", "v1.2"):
        created = await api.post("/v1/sessions", json={"id": session}, headers=A)
        assert created.status_code == 201, created.text
        assert (await api.get(f"/v1/sessions/{session}", headers=A)).status_code == 200
        assert (await api.delete(f"/v1/sessions/{session}", headers=A)).status_code == 204


@pytest.mark.parametrize("cursor", ["²", "١٢٣", "0x10", " 1", str(2**63)])
@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/{sid}/summaries"])
async def test_a_cursor_of_other_digits_gets_400(
    api: httpx.AsyncClient, sid: str, path: str, cursor: str
) -> None:
    await api.post("/v1/sessions", json={"id": sid}, headers=A)
    answer = await api.get(path.format(sid=sid), params={"cursor": cursor}, headers=A)
    assert_error(answer, 400, "cursor")


@pytest.mark.parametrize(
    "params",
    [
        {"include_superseded": "maybe"},
        {"limit": -1},
        {"limit": "9" * 50},
        {"limit": "1e3"},
    ],
    ids=["include_superseded=maybe", "limit=-1", "limit=9x50", "limit=1e3"],
)
async def test_an_odd_summaries_query_gets_422_naming_it(
    api: httpx.AsyncClient, sid: str, params: dict[str, Any]
) -> None:
    await api.post("/v1/sessions", json={"id": sid}, headers=A)
    answer = await api.get(f"/v1/sessions/{sid}/summaries", params=params, headers=A)
    assert_error(answer, 422, next(iter(params)))


# --- what a session's settings may not do ---------------------------------------------------


@pytest.fixture
async def fake_llm_client(
    database_url: str,
    engine: Any,
    fake_llm: FakeLLM,
) -> AsyncIterator[httpx.AsyncClient]:
    """An app summarizing with the fake LLM, which also allows the session model `openai/other`."""
    settings = make_settings(
        database_url,
        summary_model="openai/fake",
        summary_api_base=fake_llm.base_url,
        summary_api_key="test",
        summary_allowed_models="openai/other",
        summary_workers=0,
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        yield http


@pytest.mark.parametrize(
    ("chosen", "used"),
    [("openai/other", "openai/other"), ("local", "local")],
    ids=["allowed", "local"],
)
async def test_a_session_model_the_server_allows_writes_its_summaries(
    fake_llm_client: httpx.AsyncClient, chosen: str, used: str
) -> None:
    http = fake_llm_client
    created = await http.post("/v1/sessions", json={"id": "m", "settings": {"model": chosen}})
    assert created.status_code == 201, created.text
    batch = {"messages": [user(f"question {i}") for i in range(4)]}
    assert (await http.post("/v1/sessions/m/messages", json=batch)).status_code == 201
    answer = await http.post("/v1/sessions/m/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["model"] == used


async def test_a_session_model_the_server_does_not_allow_is_refused(
    fake_llm_client: httpx.AsyncClient,
) -> None:
    http = fake_llm_client
    refused = await http.post(
        "/v1/sessions", json={"id": "m", "settings": {"model": "ollama/llama3"}}
    )
    assert_error(refused, 422)
    assert "'ollama/llama3' is not allowed" in refused.json()["detail"]
    assert "openai/other" in refused.json()["detail"]
    assert (await http.get("/v1/sessions/m")).status_code == 404

    assert (await http.post("/v1/sessions", json={"id": "m"})).status_code == 201
    patched = await http.patch("/v1/sessions/m", json={"settings": {"model": "ollama/llama3"}})
    assert_error(patched, 422)
    assert (await http.get("/v1/sessions/m")).json()["settings"] == {}


async def test_a_stored_model_no_longer_allowed_is_summarized_with_the_server_model(
    fake_llm_client: httpx.AsyncClient, engine: Any
) -> None:
    """A model allowed when the session was configured, then dropped from the allow-list."""
    http = fake_llm_client
    assert (await http.post("/v1/sessions", json={"id": "m"})).status_code == 201
    async with engine.begin() as connection:
        await connection.execute(
            text("UPDATE sessions SET settings = :settings WHERE external_id = 'm'"),
            {"settings": json.dumps({"model": "ollama/llama3"})},
        )
    batch = {"messages": [user(f"question {i}") for i in range(4)]}
    assert (await http.post("/v1/sessions/m/messages", json=batch)).status_code == 201
    answer = await http.post("/v1/sessions/m/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["model"] == "openai/fake"


def test_one_key_for_two_tenants_is_refused(database_url: str) -> None:
    with pytest.raises(ValueError, match="two tenants"):
        make_settings(database_url, api_keys="a:same,b:same").tenant_keys()


LLM_KEY = "sk-llm-secret-4d2a91"


@pytest.mark.parametrize("failing", [False, True], ids=["answering", "failing"])
async def test_the_llm_key_is_never_logged_nor_stored(
    database_url: str,
    engine: Any,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    failing: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    if failing:
        fake_llm.fail_always(500)
    settings = make_settings(
        database_url,
        summary_model="openai/fake",
        summary_api_base=fake_llm.base_url,
        summary_api_key=LLM_KEY,
        summary_llm_max_attempts=2,
        summary_llm_backoff_seconds=0.01,
        summary_workers=0,
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        batch = {"messages": [user(f"question {i}") for i in range(4)]}
        await http.post("/v1/sessions/k/messages", json=batch)
        answer = await http.post("/v1/sessions/k/compact", json={"trigger": "overflow_retry"})
        assert answer.status_code == 200, answer.text
        summary_id = answer.json()["summary"]["id"]
        stored = (await http.get(f"/v1/summaries/{summary_id}")).text
    async with engine.connect() as connection:
        for table in ("session_summaries", "summary_jobs"):
            rows = (await connection.execute(text(f"SELECT * FROM {table}"))).all()
            stored += repr(rows)
    assert LLM_KEY not in stored
    assert LLM_KEY not in caplog.text
    assert all(LLM_KEY not in f"{record.getMessage()} {record.args!r}" for record in caplog.records)


async def test_database_errors_carry_no_statement_parameters(engine: Any) -> None:
    """Errors get logged: the user data bound into a failing statement must not be in them."""
    with pytest.raises(DBAPIError) as failure:
        async with engine.connect() as connection:
            await connection.execute(
                text("SELECT * FROM no_such_table WHERE x = :v"), {"v": "user-secret-5f1c"}
            )
    assert "no_such_table" in str(failure.value)
    assert "user-secret-5f1c" not in str(failure.value)
