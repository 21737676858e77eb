"""The console's pages through the app: what each shows of a seeded session, that it shows
one tenant's data only, its login cookie, and that data is shown as text, never as markup.

The module's app has two tenants' keys; tenant A's session (`tests/console/seeding.py`) is
seeded once.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import escape, unescape
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from api import store
from api.auth import CONSOLE_COOKIE
from api.main import create_app
from summarizer import METADATA_KEYS
from tests.conftest import QUIET, make_settings
from tests.console.seeding import (
    JOB_ERROR,
    KEYS,
    LONG_MESSAGES,
    REMOVED_SEQ,
    SCRIPT,
    A,
    Seeded,
    seed,
)
from tests.helpers import summary_draft, user


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {**QUIET, "api_keys": KEYS}


@pytest.fixture(scope="module")
async def seeded(app: FastAPI, api: httpx.AsyncClient) -> Seeded:
    return await seed(api, app.state.sessionmaker)


@asynccontextmanager
async def _logged_in(app: FastAPI, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client that logged in to the console with `key`."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        answer = await http.post("/console/login", data={"key": key})
        assert answer.status_code == 303, answer.text
        yield http


@pytest.fixture(scope="module")
async def console_a(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client logged in to the console as tenant A."""
    async with _logged_in(app, "key_a") as http:
        yield http


async def _page(http: httpx.AsyncClient, url: str, status: int = 200) -> str:
    answer = await http.get(url)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    return answer.text


def _bars(page: str) -> dict[int, tuple[int, int, int, str]]:
    """The bars drawn: summary id -> (first seq, last seq, level, state)."""
    found = re.findall(
        r'data-summary-id="(\d+)" data-first-seq="(\d+)" data-last-seq="(\d+)" '
        r'data-level="(\d+)" data-state="(\w+)"',
        page,
    )
    return {int(i): (int(f), int(last), int(lv), s) for i, f, last, lv, s in found}


async def test_sessions_page_lists_the_session_with_its_counts(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, "/console")
    row = re.search(rf'<tr data-session-id="{seeded.session_id}">(.*?)</tr>', page)
    assert row is not None
    numbers = re.findall(r'<td class="n">(\d+)</td>', row.group(1))
    # messages (12 less the removed one), live summaries (the roll-up, the fallback), fallbacks
    assert numbers == ["11", "2", "1"]


async def test_search_keeps_the_sessions_whose_id_starts_with_the_text(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    found = await _page(console_a, f"/console?q={seeded.session_id[:12]}")
    missed = await _page(console_a, f"/console?q={seeded.session_id[1:]}")
    assert f'data-session-id="{seeded.session_id}"' in found
    assert f'data-session-id="{seeded.session_id}"' not in missed


async def test_bars_match_the_summaries_seq_ranges(
    console_a: httpx.AsyncClient, api: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    listed = await api.get(
        f"/v1/sessions/{seeded.session_id}/summaries",
        params={"include_superseded": "true"},
        headers=A,
    )
    expected = {
        s["id"]: (s["first_seq"], s["last_seq"], s["level"]) for s in listed.json()["summaries"]
    }
    drawn = _bars(page)
    assert {k: v[:3] for k, v in drawn.items()} == expected
    assert drawn[seeded.rollup][3] == "live"
    assert {drawn[leaf][3] for leaf in seeded.leaves} == {"superseded"}
    fallback_bar = re.search(
        rf'<a class="bar ([a-z ]+)"[^>]*data-summary-id="{seeded.fallback}"', page
    )
    assert fallback_bar is not None and "fallback" in fallback_bar.group(1).split()


async def test_removed_message_is_greyed_in_the_timeline(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    assert re.search(rf'<tr id="seq-{REMOVED_SEQ}" class="removed"', page)
    assert re.search(r'<tr id="seq-1" class="shown"', page)


@pytest.mark.parametrize("max_tokens", [30, 4000])
async def test_context_equals_the_history_for_the_same_budget(
    console_a: httpx.AsyncClient, api: httpx.AsyncClient, seeded: Seeded, max_tokens: int
) -> None:
    page = await _page(console_a, f"/console/sessions/{seeded.session_id}?max_tokens={max_tokens}")
    history = await api.get(
        f"/v1/sessions/{seeded.session_id}/history", params={"max_tokens": max_tokens}, headers=A
    )
    shown = re.search(r'<pre id="context-json">(.*?)</pre>', page, re.S)
    assert shown is not None
    assert json.loads(unescape(shown.group(1))) == history.json()["context"]
    left_out = history.json()["omitted"]["summaries"]
    assert ('id="truncated"' in page) == bool(left_out)
    for summary_id in left_out:
        assert f"summary {summary_id}</a> · level" in page


async def test_a_script_in_a_message_is_shown_as_text(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    assert SCRIPT not in page
    assert escape(SCRIPT, quote=False) in page
    answer = await console_a.get(f"/console/sessions/{seeded.session_id}")
    assert "script-src 'self'" in answer.headers["content-security-policy"]


async def test_summary_page_shows_its_source_messages(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/summaries/{seeded.leaves[0]}")
    assert re.findall(r'<tr class="shown" data-seq="(\d+)"', page) == ["1", "2", "3", "4"]
    assert "summary of 1-4" in page
    assert f'href="/console/summaries/{seeded.rollup}"' in page  # superseded by the roll-up


async def test_rollup_page_lists_the_summaries_it_absorbed(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/summaries/{seeded.rollup}")
    absorbed = re.search(r'<ul id="absorbed">(.*?)</ul>', page, re.S)
    assert absorbed is not None
    ids = [int(i) for i in re.findall(r'data-summary-id="(\d+)"', absorbed.group(1))]
    assert ids == list(seeded.leaves)


def _metadata(page: str) -> Any:
    shown = re.search(r'<pre id="metadata-json">(.*?)</pre>', page, re.S)
    assert shown is not None
    return json.loads(unescape(shown.group(1)))


async def test_fallback_summary_page_shows_its_fallback_reason(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/summaries/{seeded.fallback}")
    assert re.search(r'<p class="marks" id="marks">fallback</p>', page)
    assert _metadata(page)["fallback_reason"] == "llm_unavailable"


async def test_summary_metadata_is_shown_as_the_apis_json(
    app: FastAPI, console_a: httpx.AsyncClient, api: httpx.AsyncClient
) -> None:
    sid = f"console-metadata-{uuid.uuid4().hex[:8]}"
    batch = {"messages": [user(f"m{n}") for n in range(4)]}
    assert (await api.post(f"/v1/sessions/{sid}/messages", json=batch, headers=A)).is_success
    metadata = {
        "extra": {"nested": [1, None]},
        "trigger": "manual",
        "truncated": False,
        "repair_of": None,
        "usage": {},
        "compression_ratio": 0.125,
    }
    async with app.state.sessionmaker() as db:
        session = await store.get_session(db, "tenant_a", sid)
        draft = dataclasses.replace(summary_draft(1, 4), metadata=metadata)
        made = await store.save_summary(db, session.id, draft)
        await db.commit()
    answer = await api.get(f"/v1/summaries/{made.id}", headers=A)
    page = await _page(console_a, f"/console/summaries/{made.id}")
    shown = _metadata(page)
    assert shown == answer.json()["metadata"] == metadata
    pre = re.search(r'<pre id="metadata-json">(.*?)</pre>', page, re.S)
    assert pre is not None and "None" not in pre.group(1) and "null" in pre.group(1)
    known = [key for key in METADATA_KEYS if key in metadata]
    assert list(shown) == known + sorted(set(metadata) - set(known))  # the design's keys first


async def test_health_page_shows_the_failing_job_and_the_fallback(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, "/console/health")
    assert '<b id="jobs-failing">1</b>' in page
    assert '<b id="jobs-pending">1</b>' in page
    assert escape(JOB_ERROR) in page
    fallbacks = re.search(r'<ul id="fallbacks">(.*?)</ul>', page, re.S)
    assert fallbacks is not None
    assert f'data-summary-id="{seeded.fallback}"' in fallbacks.group(1)


async def test_another_tenants_session_and_summary_answer_404(app: FastAPI, seeded: Seeded) -> None:
    async with _logged_in(app, "key_b") as console_b:
        listing = await _page(console_b, "/console")
        await _page(console_b, f"/console/sessions/{seeded.session_id}", status=404)
        await _page(console_b, f"/console/summaries/{seeded.rollup}", status=404)
    assert seeded.session_id not in listing


async def test_login_keeps_a_token_in_an_httponly_strict_cookie(app: FastAPI) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        answer = await http.post("/console/login", data={"key": "key_a"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{CONSOLE_COOKIE}=")
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/console"} <= flags
    assert "key_a" not in cookie


async def test_a_wrong_key_answers_401_with_the_form_again(app: FastAPI) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        answer = await http.post("/console/login", data={"key": "key_c"})
        after = await http.get("/console")
    assert answer.status_code == 401
    assert 'id="problem">invalid API key<' in answer.text
    assert 'id="login"' in answer.text
    assert "set-cookie" not in answer.headers
    assert after.status_code == 401


async def test_a_login_posted_from_another_site_is_refused(app: FastAPI) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        answer = await http.post(
            "/console/login", data={"key": "key_a"}, headers={"Sec-Fetch-Site": "cross-site"}
        )
        same_site = await http.post(
            "/console/login", data={"key": "key_a"}, headers={"Sec-Fetch-Site": "same-origin"}
        )
    assert answer.status_code == 401
    assert "another site" in answer.text
    assert "set-cookie" not in answer.headers
    assert same_site.status_code == 303


async def test_pages_without_a_cookie_ask_for_a_key(app: FastAPI, seeded: Seeded) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as http:
        answer = await http.get(f"/console/sessions/{seeded.session_id}")
        forged = await http.get("/console", cookies={CONSOLE_COOKIE: "key_a"})
    assert answer.status_code == 401 and 'id="login"' in answer.text
    assert seeded.session_id not in answer.text
    assert forged.status_code == 401


async def test_the_console_is_not_in_the_openapi_document(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json", headers=A)).json()
    assert not [path for path in document["paths"] if path.startswith("/console")]


async def test_timeline_pages_by_200_seqs(
    console_a: httpx.AsyncClient, api: httpx.AsyncClient
) -> None:
    sid = f"console-long-{uuid.uuid4().hex[:8]}"
    batch = {"messages": [user(f"m{n}") for n in range(250)]}
    assert (await api.post(f"/v1/sessions/{sid}/messages", json=batch, headers=A)).is_success
    newest = await _page(console_a, f"/console/sessions/{sid}")
    first = await _page(console_a, f"/console/sessions/{sid}?page=1")
    assert re.findall(r'data-seq="(\d+)"', newest) == [str(s) for s in range(201, 251)]
    assert re.findall(r'data-seq="(\d+)"', first) == [str(s) for s in range(1, 201)]
    assert "page 1 of 2" in first and 'id="page-next"' in first


async def test_a_summarys_sources_page_by_200_seqs_of_its_own_range(
    app: FastAPI, console_a: httpx.AsyncClient, api: httpx.AsyncClient
) -> None:
    sid = f"console-wide-{uuid.uuid4().hex[:8]}"
    batch = {"messages": [user(f"m{n}") for n in range(300)]}
    said = await api.post(f"/v1/sessions/{sid}/messages", json=batch, headers=A)
    assert said.is_success
    removed_id = said.json()["messages"][59]["id"]  # seq 60: in the range, linked by nothing
    assert (await api.delete(f"/v1/sessions/{sid}/messages/{removed_id}", headers=A)).is_success
    async with app.state.sessionmaker() as db:
        session = await store.get_session(db, "tenant_a", sid)
        await store.save_summary(db, session.id, summary_draft(1, 50))
        wide = await store.save_summary(db, session.id, summary_draft(51, 300))
        await db.commit()

    first = await _page(console_a, f"/console/summaries/{wide.id}")
    last = await _page(console_a, f"/console/summaries/{wide.id}?page=2")

    assert re.findall(r'data-seq="(\d+)"', first) == [str(s) for s in range(51, 251) if s != 60]
    assert re.findall(r'data-seq="(\d+)"', last) == [str(s) for s in range(251, 301)]
    assert "Source messages (249)" in first
    assert "seqs 51..250 · page 1 of 2" in first and 'id="page-next"' in first
    assert "seqs 251..300 · page 2 of 2" in last and 'id="page-previous"' in last


async def test_development_mode_serves_loopback_only(database_url: str) -> None:
    app = create_app(make_settings(database_url, **QUIET))
    async with app.router.lifespan_context(app):
        for host, status in (("127.0.0.1", 200), ("203.0.113.9", 403)):
            transport = httpx.ASGITransport(app=app, client=(host, 1234))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                assert (await http.get("/console")).status_code == status


async def test_the_newest_page_opens_at_its_newest_rows_with_the_context_below(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    newest = await _page(console_a, f"/console/sessions/{seeded.long_id}")
    first = await _page(console_a, f"/console/sessions/{seeded.long_id}?page=1")
    assert re.findall(r'<tr id="seq-(\d+)"', newest) == [
        str(s) for s in range(201, LONG_MESSAGES + 1)
    ]
    # the newest page's box is scrolled to its end by the script; an older page's is not
    assert '<div id="timeline-box" class="scroller" data-open="end">' in newest
    assert '<div id="timeline-box" class="scroller">' in first
    # the context preview comes right after the timeline's box
    assert '</tbody></table></div></section><section id="context">' in newest
    assert "page 1 of 2" in first and 'id="page-next"' in first and 'id="page-last"' in first


async def test_erased_summaries_are_folded_below_the_live_coverage(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    live, *erased = seeded.long_summaries
    first = await _page(console_a, f"/console/sessions/{seeded.long_id}?page=1")
    newest = await _page(console_a, f"/console/sessions/{seeded.long_id}")
    shown, folded = first.split('<details id="erased-summaries">')
    assert {i: bar[3] for i, bar in _bars(shown).items()} == {live: "live"}
    # closed until opened; the six erased summaries reaching into seqs 1..200
    assert re.match(r"<summary>6 erased summaries ", folded)
    assert set(_bars(folded)) == set(erased[:6])
    assert {bar[3] for bar in _bars(folded).values()} == {"erased"}
    assert '<details id="erased-summaries"><summary>2 erased summaries ' in newest
    assert 'id="no-live-summaries"' in newest and 'id="no-summaries"' not in newest


async def test_the_legend_holds_labels_not_bars(
    console_a: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    legend = re.search(r'<p class="legend" id="legend">(.*?)</p>', page)
    assert legend is not None
    assert re.findall(r"</i>(\w+)</span>", legend.group(1)) == [
        "live",
        "superseded",
        "erased",
        "fallback",
        "repair",
    ]
    assert 'class="bar' not in legend.group(1) and "<a " not in legend.group(1)


async def test_a_forks_page_links_its_parent_at_the_fork_point(
    console_a: httpx.AsyncClient, api: httpx.AsyncClient, seeded: Seeded
) -> None:
    fork_id = f"console-fork-{uuid.uuid4().hex[:8]}"
    made = await api.post(
        f"/v1/sessions/{seeded.long_id}/fork", json={"seq": 230, "id": fork_id}, headers=A
    )
    assert made.status_code == 201, made.text
    page = await _page(console_a, f"/console/sessions/{fork_id}")
    parent = f"/console/sessions/{seeded.long_id}?page=2"  # seq 230 is on the parent's page 2
    assert f'Fork of <a id="fork-parent" href="{parent}">{seeded.long_id}</a>' in page
    assert f'at seq <a id="fork-point" href="{parent}#seq-230">230</a>' in page
    assert re.search(r'<tr id="seq-230" class="shown fork-point"', page)
    assert 'id="seq-230"' in await _page(console_a, parent)
    plain = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    assert 'id="fork"' not in plain and "fork-point" not in plain


async def test_a_conversations_rows_show_their_item_ids(
    console_a: httpx.AsyncClient, api: httpx.AsyncClient, seeded: Seeded
) -> None:
    cid = f"conv_console_{uuid.uuid4().hex[:8]}"
    question = {"type": "message", "role": "user", "content": "Weather in Paris?"}
    derived = await api.post(  # no client_id: served under an id derived from the row id
        f"/v1/sessions/{cid}/messages", json={"items": [{"item": question}]}, headers=A
    )
    assert derived.status_code == 201, derived.text
    call = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    answer = {"type": "message", "role": "assistant", "content": "Sunny.", "id": "msg_own"}
    added = await api.post(
        f"/v1/conversations/{cid}/items", json={"items": [call, result, answer]}, headers=A
    )
    assert added.status_code == 200, added.text
    listed = await api.get(f"/v1/conversations/{cid}/items", params={"order": "asc"}, headers=A)
    ids = [item["id"] for item in listed.json()["data"]]
    page = await _page(console_a, f"/console/sessions/{cid}")
    shown = re.findall(
        r'<tr id="seq-\d+" [^>]*><td class="n">\d+</td><td class="n">\d+</td>'
        r'<td class="item-id">([^<]*)</td>',
        page,
    )
    assert shown == ids
    assert ids[0].startswith("msg_") and ids[1].startswith("fc_") and ids[3] == "msg_own"
    assert '<th class="item-id">item id</th>' in page
    chat = await _page(console_a, f"/console/sessions/{seeded.session_id}")
    assert "item-id" not in chat


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/console/sessions/{sid}?max_tokens=0", 422, "max_tokens: must be at least 1"),
        ("/console/sessions/{sid}?max_tokens=abc", 422, "max_tokens"),
        ("/console/summaries/abc", 422, "summary_id"),
        ("/console/no-such-page", 404, "no route matches"),
    ],
)
async def test_a_console_path_in_error_answers_a_page_not_json(
    console_a: httpx.AsyncClient, seeded: Seeded, path: str, status: int, says: str
) -> None:
    page = await _page(console_a, path.format(sid=seeded.session_id), status=status)
    assert says in unescape(page) and 'href="/console"' in page
