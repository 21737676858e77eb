"""Path and query parameters: a bad session id, summary id or cursor, an out-of-range or unknown
parameter gets its 4xx in the one error shape, naming the parameter; nothing is stored.

Tests share the module's app (`api`), each on its own session id (the `session_id` and `url`
fixtures of `tests/routes/conftest.py`).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.helpers import assert_error, user

# --- path and query parameters --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["x" * 129, "bad$id", "bad%20id", "caf%C3%A9"], ids=["too long", "$", "space", "é"]
)
async def test_a_bad_session_id_in_the_path_gets_422(api: httpx.AsyncClient, bad_id: str) -> None:
    answer = await api.post(f"/v1/sessions/{bad_id}/messages", json={"messages": [user("fine")]})
    assert_error(answer, 422, "session_id")
    listed = (await api.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
    assert not [s for s in listed if not s["id"].startswith("v-")]


async def test_a_session_id_of_128_characters_is_accepted(api: httpx.AsyncClient) -> None:
    long_id = f"v-{uuid.uuid4().hex}".ljust(128, "x")
    assert len(long_id) == 128
    answer = await api.post(f"/v1/sessions/{long_id}/messages", json={"messages": [user("fine")]})
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("messages", {"after_seq": -1}, "after_seq"),
        ("messages", {"after_seq": 2**70}, "after_seq"),
        ("messages", {"limit": 0}, "limit"),
        ("messages", {"limit": 100_000}, "limit"),
        ("messages", {"limit": "ten"}, "limit"),
        ("history", {"max_tokens": 0}, "max_tokens"),
        ("history", {"max_tokens": -5}, "max_tokens"),
        ("history", {"max_tokens": 10**12}, "max_tokens"),
        ("history", {"summary_limit": 0}, "summary_limit"),
    ],
    ids=[
        "after_seq=-1",
        "after_seq=2**70",
        "limit=0",
        "limit=100000",
        "limit=ten",
        "max_tokens=0",
        "max_tokens=-5",
        "max_tokens=10**12",
        "summary_limit=0",
    ],
)
async def test_an_out_of_range_query_parameter_gets_422(
    api: httpx.AsyncClient,
    url: str,
    session_id: str,
    path: str,
    params: dict[str, Any],
    field: str,
) -> None:
    assert (await api.post(url, json={"messages": [user("fine")]})).status_code == 201
    answer = await api.get(f"/v1/sessions/{session_id}/{path}", params=params)
    assert_error(answer, 422, field)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 100_000}], ids=["0", "100000"])
async def test_an_out_of_range_session_list_limit_gets_422(
    api: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    assert_error(await api.get("/v1/sessions", params=params), 422, "limit")


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "9" * 20])
async def test_a_bad_cursor_gets_400(api: httpx.AsyncClient, cursor: str) -> None:
    assert_error(await api.get("/v1/sessions", params={"cursor": cursor}), 400, "cursor")


async def session_count(api: httpx.AsyncClient) -> int:
    answer = await api.get("/v1/sessions", params={"limit": 1000})
    return len(answer.json()["sessions"])


@pytest.mark.parametrize("bad_id", ["abc", "-1", "0", "1.5", "1e3", str(2**64), "%00"])
async def test_an_odd_summary_id_gets_422_naming_it(api: httpx.AsyncClient, bad_id: str) -> None:
    assert_error(await api.get(f"/v1/summaries/{bad_id}"), 422, "summary_id")


@pytest.mark.parametrize("bad_id", ["%00", "a%2Fb", "%F0%9F%98%80", "x" * 129])
async def test_an_odd_session_id_on_compact_gets_a_4xx_and_stores_nothing(
    api: httpx.AsyncClient, bad_id: str
) -> None:
    before = await session_count(api)
    answer = await api.post(f"/v1/sessions/{bad_id}/compact", json={})
    assert answer.status_code in (404, 422), answer.text
    assert set(answer.json()) == {"error", "detail"}
    assert await session_count(api) == before


@pytest.mark.parametrize("dots", [".", ".."])
async def test_a_dot_segment_session_id_is_refused_at_create(
    api: httpx.AsyncClient, dots: str
) -> None:
    """Clients resolve `.` and `..` in a URL path: such a session could never be addressed."""
    before = await session_count(api)
    assert_error(await api.post("/v1/sessions", json={"id": dots}), 422, "id")
    assert await session_count(api) == before


async def test_ids_with_dots_that_are_not_dot_segments_are_accepted(
    api: httpx.AsyncClient,
) -> None:
    for session in ("...", ".a", "a.", "v1.2"):
        created = await api.post("/v1/sessions", json={"id": session})
        assert created.status_code == 201, created.text
        assert (await api.get(f"/v1/sessions/{session}")).status_code == 200
        assert (await api.delete(f"/v1/sessions/{session}")).status_code == 204


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
    api: httpx.AsyncClient, session_id: str, path: str, params: dict[str, str]
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    name = next(iter(params))
    answer = await api.get(path.format(sid=session_id), params=params)
    assert_error(answer, 422, f"query.{name}")


@pytest.mark.parametrize("cursor", ["²", "١٢٣", "0x10", " 1", str(2**63)])
@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/{sid}/summaries"])
async def test_a_cursor_of_other_digits_gets_400(
    api: httpx.AsyncClient, session_id: str, path: str, cursor: str
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    answer = await api.get(path.format(sid=session_id), params={"cursor": cursor})
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
    api: httpx.AsyncClient, session_id: str, params: dict[str, Any]
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    answer = await api.get(f"/v1/sessions/{session_id}/summaries", params=params)
    assert_error(answer, 422, next(iter(params)))
