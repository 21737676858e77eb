"""Bearer keys per tenant; tenants never see each other; no keys means loopback only.

The key rule holds on every path but the probes, and is checked before anything of the body
is read. Tests share the module's app (with two tenants' keys), each on its own session ids.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.main import create_app
from tests.conftest import QUIET, make_settings
from tests.helpers import assert_error, summary_draft, user

KEYS = "tenant_a:key_a,tenant_b:key_b"
A = {"Authorization": "Bearer key_a"}
B = {"Authorization": "Bearer key_b"}
OPERATOR = {"Authorization": "Bearer key_operator"}


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {**QUIET, "api_keys": KEYS, "operator_key": "key_operator"}


@asynccontextmanager
async def client_at(
    database_url: str, host: str, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app, connecting from `host`."""
    app = create_app(make_settings(database_url, **{**QUIET, **settings}))
    transport = httpx.ASGITransport(app=app, client=(host, 1234))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as http,
    ):
        yield http


def messages(*contents: str) -> dict[str, Any]:
    return {"messages": [user(c) for c in contents]}


async def stored_contents(api: httpx.AsyncClient, sid: str, headers: dict[str, str]) -> list[str]:
    answer = await api.get(f"/v1/sessions/{sid}/messages", headers=headers)
    assert answer.status_code == 200, answer.text
    return [m["content"] for m in answer.json()["messages"]]


# --- keys -----------------------------------------------------------------------------------

V1_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/v1/sessions", None),
    ("POST", "/v1/sessions", {"id": "new"}),
    ("GET", "/v1/sessions/{sid}", None),
    ("PATCH", "/v1/sessions/{sid}", {"metadata": {}}),
    ("DELETE", "/v1/sessions/{sid}", None),
    ("GET", "/v1/sessions/{sid}/messages", None),
    ("POST", "/v1/sessions/{sid}/messages", messages("hi")),
    ("GET", "/v1/sessions/{sid}/history", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), V1_ROUTES, ids=[f"{m} {p}" for m, p, _ in V1_ROUTES]
)
async def test_every_v1_route_without_a_key_gets_401(
    api: httpx.AsyncClient, sid: str, method: str, path: str, body: Any
) -> None:
    answer = await api.request(method, path.format(sid=sid), json=body)
    assert answer.status_code == 401
    assert set(answer.json()) == {"error", "detail"}


async def test_a_wrong_key_gets_401(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions", headers={"Authorization": "Bearer key_c"})
    assert answer.status_code == 401


async def test_a_key_in_another_scheme_gets_401(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions", headers={"Authorization": "Basic key_a"})
    assert answer.status_code == 401


async def test_an_anthropic_style_key_outside_the_messages_api_is_told_where_it_counts(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.get("/v1/sessions", headers={"x-api-key": "key_a"})
    assert answer.status_code == 401
    assert "/v1/messages only" in answer.json()["detail"]


async def test_a_tenant_name_is_not_a_key(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions", headers={"Authorization": "Bearer tenant_a"})
    assert answer.status_code == 401


async def test_an_append_without_a_key_stores_nothing(api: httpx.AsyncClient, sid: str) -> None:
    assert (await api.post(f"/v1/sessions/{sid}/messages", json=messages("x"))).status_code == 401
    assert (await api.get(f"/v1/sessions/{sid}", headers=A)).status_code == 404


async def test_a_valid_key_is_served(api: httpx.AsyncClient, sid: str) -> None:
    answer = await api.post(f"/v1/sessions/{sid}/messages", json=messages("x"), headers=A)
    assert answer.status_code == 201
    assert await stored_contents(api, sid, A) == ["x"]


async def test_healthz_needs_no_key(api: httpx.AsyncClient) -> None:
    answer = await api.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


async def test_readyz_needs_no_key(api: httpx.AsyncClient) -> None:
    answer = await api.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


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
"""Paths outside the `V1_ROUTES` above: operator routes, the docs, unknown routes and methods."""


@pytest.mark.parametrize(("method", "path"), NEEDS_A_KEY, ids=[" ".join(r) for r in NEEDS_A_KEY])
async def test_every_path_but_the_probes_needs_a_key(
    api: httpx.AsyncClient, method: str, path: str
) -> None:
    answer = await api.request(method, path)
    assert_error(answer, 401, "API key")
    assert answer.headers["www-authenticate"] == "Bearer"


async def test_metrics_refuse_a_tenants_key(api: httpx.AsyncClient) -> None:
    """The counters are every tenant's traffic: no tenant reads them."""
    for headers in (A, B):
        answer = await api.get("/metrics", headers=headers)
        assert_error(answer, 403, "OPERATOR_KEY")
        assert "precis_" not in answer.text


async def test_metrics_refuse_a_wrong_key_with_401(api: httpx.AsyncClient) -> None:
    answer = await api.get("/metrics", headers={"Authorization": "Bearer key_operatoX"})
    assert_error(answer, 401, "API key")


async def test_the_operator_key_opens_metrics_and_nothing_else(api: httpx.AsyncClient) -> None:
    assert_error(await api.get("/v1/sessions", headers=OPERATOR), 401, "API key")
    answer = await api.get("/metrics", headers=OPERATOR)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert "precis_summaries_total" in answer.text


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


def test_one_key_for_two_tenants_is_refused(database_url: str) -> None:
    with pytest.raises(ValueError, match="two tenants"):
        make_settings(database_url, api_keys="a:same,b:same").tenant_keys()


# --- tenant isolation -----------------------------------------------------------------------

SESSION_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/v1/sessions/{sid}", None),
    ("PATCH", "/v1/sessions/{sid}", {"metadata": {"taken": "over"}}),
    ("DELETE", "/v1/sessions/{sid}", None),
    ("GET", "/v1/sessions/{sid}/messages", None),
    ("GET", "/v1/sessions/{sid}/history", None),
    ("GET", "/v1/sessions/{sid}/summaries", None),
    ("POST", "/v1/sessions/{sid}/compact", {"trigger": "manual"}),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), SESSION_ROUTES, ids=[f"{m} {p}" for m, p, _ in SESSION_ROUTES]
)
async def test_another_tenants_session_is_not_found_on_every_route(
    api: httpx.AsyncClient, sid: str, method: str, path: str, body: Any
) -> None:
    created = await api.post(
        "/v1/sessions", json={"id": sid, "metadata": {"owner": "a"}}, headers=A
    )
    assert created.status_code == 201
    await api.post(f"/v1/sessions/{sid}/messages", json=messages("secret"), headers=A)
    answer = await api.request(method, path.format(sid=sid), json=body, headers=B)
    assert answer.status_code == 404
    assert "secret" not in answer.text
    session = (await api.get(f"/v1/sessions/{sid}", headers=A)).json()
    assert (session["metadata"], session["last_seq"]) == ({"owner": "a"}, 1)


async def test_two_authorization_headers_are_refused_even_if_both_are_valid(
    api: httpx.AsyncClient,
) -> None:
    two = httpx.Headers(
        [("authorization", A["Authorization"]), ("authorization", B["Authorization"])]
    )
    answer = await api.get("/v1/sessions", headers=two)
    assert answer.status_code == 401
    assert answer.json() == {
        "error": "Unauthorized",
        "detail": "more than one Authorization header",
    }


async def test_another_tenants_summary_is_not_found(
    api: httpx.AsyncClient, app_db: AsyncSession, sid: str
) -> None:
    await api.post(f"/v1/sessions/{sid}/messages", json=messages("one", "two"), headers=A)
    session = await store.get_session(app_db, "tenant_a", sid)
    summary = await store.save_summary(app_db, session.id, summary_draft(1, 2))
    await app_db.commit()
    assert (await api.get(f"/v1/summaries/{summary.id}", headers=A)).status_code == 200
    answer = await api.get(f"/v1/summaries/{summary.id}", headers=B)
    assert answer.status_code == 404
    assert "secret" not in answer.text


async def test_appending_to_another_tenants_id_creates_a_separate_session(
    api: httpx.AsyncClient, sid: str
) -> None:
    await api.post(f"/v1/sessions/{sid}/messages", json=messages("a1", "a2", "a3"), headers=A)
    answer = await api.post(f"/v1/sessions/{sid}/messages", json=messages("b1"), headers=B)
    assert answer.status_code == 201
    assert answer.json()["messages"][0]["seq"] == 1
    assert await stored_contents(api, sid, A) == ["a1", "a2", "a3"]
    assert await stored_contents(api, sid, B) == ["b1"]


async def test_the_same_external_id_can_exist_in_both_tenants(
    api: httpx.AsyncClient, sid: str
) -> None:
    first = await api.post("/v1/sessions", json={"id": sid}, headers=A)
    second = await api.post("/v1/sessions", json={"id": sid}, headers=B)
    assert (first.status_code, second.status_code) == (201, 201)


async def test_a_tenant_lists_only_its_own_sessions(api: httpx.AsyncClient, sid: str) -> None:
    for owner, headers in (("a1", A), ("a2", A), ("b1", B)):
        await api.post("/v1/sessions", json={"id": f"{sid}-{owner}"}, headers=headers)
    listed = (await api.get("/v1/sessions", params={"limit": 1000}, headers=B)).json()
    ids = {s["id"] for s in listed["sessions"]}
    assert f"{sid}-b1" in ids
    assert not ids & {f"{sid}-a1", f"{sid}-a2"}


async def test_a_tenants_delete_leaves_the_other_tenants_session(
    api: httpx.AsyncClient, sid: str
) -> None:
    await api.post(f"/v1/sessions/{sid}/messages", json=messages("a"), headers=A)
    await api.post(f"/v1/sessions/{sid}/messages", json=messages("b"), headers=B)
    assert (await api.delete(f"/v1/sessions/{sid}", headers=B)).status_code == 204
    assert await stored_contents(api, sid, A) == ["a"]


# --- development mode (no keys) -------------------------------------------------------------
# These build their own apps; `app` is used only so that its teardown deletes their sessions.

dev_mode = pytest.mark.usefixtures("app")


@dev_mode
async def test_without_keys_a_non_loopback_client_gets_403(database_url: str, sid: str) -> None:
    async with client_at(database_url, "10.0.0.5") as remote:
        answer = await remote.post(f"/v1/sessions/{sid}/messages", json=messages("x"))
        assert answer.status_code == 403
        assert set(answer.json()) == {"error", "detail"}
    async with client_at(database_url, "127.0.0.1") as local:
        assert (await local.get(f"/v1/sessions/{sid}")).status_code == 404


@dev_mode
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_without_keys_a_loopback_client_is_served(
    database_url: str, sid: str, host: str
) -> None:
    async with client_at(database_url, host) as local:
        answer = await local.post(f"/v1/sessions/{sid}/messages", json=messages("x"))
        assert answer.status_code == 201
        assert (await local.get(f"/v1/sessions/{sid}")).status_code == 200


@dev_mode
@pytest.mark.parametrize(
    ("origin", "status"),
    [("https://evil.example", 403), ("http://localhost:3000", 201), ("http://127.0.0.1", 201)],
)
async def test_without_keys_a_web_page_of_another_site_is_refused(
    database_url: str, sid: str, origin: str, status: int
) -> None:
    """A page elsewhere could post a body without Content-Type (read as JSON) to a local
    server without asking first: development mode serves only local pages."""
    async with client_at(database_url, "127.0.0.1") as local:
        body = b'{"messages": [{"role": "user", "content": "x"}]}'
        answer = await local.post(
            f"/v1/sessions/{sid}/messages", content=body, headers={"origin": origin}
        )
        assert answer.status_code == status, answer.text
        stored = (await local.get(f"/v1/sessions/{sid}")).status_code
        assert stored == (200 if status == 201 else 404)


@dev_mode
@pytest.mark.parametrize(
    ("host_header", "status"),
    [
        ("attacker.example:8422", 403),
        ("127.0.0.1.nip.io", 403),
        ("localhost:8000", 200),
        ("127.0.0.1:8422", 200),
        ("[::1]:8000", 200),
        ("app.localhost", 200),
    ],
)
async def test_without_keys_a_request_addressed_to_another_name_is_refused(
    database_url: str, sid: str, host_header: str, status: int
) -> None:
    """DNS rebinding: a page of another site whose name was pointed at 127.0.0.1 reaches the
    server from loopback, same-origin (no `Origin`), with its own name in `Host`."""
    async with client_at(database_url, "127.0.0.1") as local:
        await local.post(f"/v1/sessions/{sid}/messages", json=messages("secret"))
        for path in (f"/v1/sessions/{sid}/messages", "/console"):
            answer = await local.get(path, headers={"host": host_header})
            assert answer.status_code == status, (path, answer.text)
            if status == 403:
                assert "secret" not in answer.text
                assert "localhost" in answer.json()["detail"]


@dev_mode
async def test_without_keys_metrics_and_docs_are_refused_to_non_loopback_clients(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="precis.auth")
    async with client_at(database_url, "203.0.113.9") as remote:
        for path in ("/metrics", "/openapi.json", "/v1/sessions"):
            assert_error(await remote.get(path), 403, "loopback")
    assert "203.0.113.9" in caplog.text and "no API_KEYS" in caplog.text


@dev_mode
async def test_without_keys_the_probes_answer_non_loopback_clients(database_url: str) -> None:
    async with client_at(database_url, "203.0.113.9") as remote:
        assert (await remote.get("/healthz")).status_code == 200
        assert (await remote.get("/readyz")).status_code == 200


@dev_mode
async def test_with_keys_and_no_operator_key_metrics_answer_no_one(database_url: str) -> None:
    async with client_at(database_url, "127.0.0.1", api_keys=KEYS) as local:
        assert_error(await local.get("/metrics", headers=A), 403, "OPERATOR_KEY")
        assert_error(await local.get("/metrics"), 401, "OPERATOR_KEY")


@dev_mode
async def test_with_keys_a_non_loopback_client_with_a_key_is_served(database_url: str) -> None:
    async with client_at(database_url, "10.0.0.5", api_keys=KEYS) as remote:
        assert (await remote.get("/v1/sessions", headers=A)).status_code == 200
