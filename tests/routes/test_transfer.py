"""Export and import: a session as JSON Lines comes back the same on any database, and a file
that is malformed, cut short or inconsistent is refused at its line with nothing stored; a body
over the import's limits is refused as it streams in, a message over the append's limits as an
append would be, and every message's tokens are counted again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.auth import DEVELOPMENT_TENANT
from api.db.models import Message, Summary
from api.main import create_app
from summarizer.summarize import FALLBACK_MODEL
from tests.conftest import make_settings, migrated_database
from tests.helpers import (
    append,
    append_items,
    assert_error,
    assert_session_absent,
    assistant,
    run_verify,
    tool_call,
    tool_result,
    user,
)
from tests.scripts.builders import REMOVALS, removal_session

Lines = list[dict[str, Any]]


async def export(http: httpx.AsyncClient, sid: str) -> bytes:
    answer = await http.get(f"/v1/sessions/{sid}/export")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-ndjson"
    return answer.content


def parsed(body: bytes) -> Lines:
    return [json.loads(line) for line in body.splitlines()]


def unparsed(lines: Lines) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def import_file(
    http: httpx.AsyncClient, body: bytes, as_id: str | None = None
) -> httpx.Response:
    params = {} if as_id is None else {"id": as_id}
    return await http.post(
        "/v1/sessions/import",
        content=body,
        params=params,
        headers={"content-type": "application/x-ndjson"},
    )


def renamed(body: bytes, old: str, new: str) -> bytes:
    """The export of session `old` as the same session under the id `new` would read."""
    first, rest = body.split(b"\n", 1)
    session = json.loads(first)
    assert session["id"] == old
    line = json.dumps({**session, "id": new}, separators=(",", ":"), ensure_ascii=False)
    return line.encode() + b"\n" + rest


async def fallback_summary(
    sessionmaker: async_sessionmaker[AsyncSession], sid: str, first_seq: int, last_seq: int
) -> None:
    """A live summary written without the model, as the summarizer's fallback stores one."""
    async with sessionmaker() as db:
        session = await store.get_session(db, DEVELOPMENT_TENANT, sid)
        await store.save_summary(
            db,
            session.id,
            store.SummaryDraft(
                first_seq=first_seq,
                last_seq=last_seq,
                summary_text="The user and the assistant talked.",
                summary_prompt="",
                model=FALLBACK_MODEL,
                temperature=0.0,
                target_summary_tokens=200,
                keep_last_n=0,
                approx_tokens=7,
                metadata={"fallback": True, "fallback_reason": "llm_unavailable"},
            ),
        )
        await db.commit()


async def rows(sessionmaker: async_sessionmaker[AsyncSession]) -> tuple[int, int]:
    """How many messages and summaries the database holds."""
    async with sessionmaker() as db:
        messages = await db.scalar(select(func.count()).select_from(Message))
        summaries = await db.scalar(select(func.count()).select_from(Summary))
        return int(messages or 0), int(summaries or 0)


# --- round trips ----------------------------------------------------------------------------


@REMOVALS
async def test_a_chat_session_comes_back_byte_for_byte(
    client: httpx.AsyncClient,
    sid: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    await removal_session(client, sid)  # tombstones, a roll-up, superseded and erased summaries
    _call, result = (await append(client, sid, tool_call("c2"), tool_result("c2")))["messages"]
    removed = await client.delete(f"/v1/sessions/{sid}/messages/{result['id']}")
    assert removed.status_code == 204  # the call is orphaned
    await append(client, sid, user("and now?"), assistant("all done"))
    await fallback_summary(sessionmaker, sid, 7, 12)
    original = await export(client, sid)

    answer = await import_file(client, original, as_id=f"{sid}-copy")

    assert answer.status_code == 201, answer.text
    assert answer.json() == {"id": f"{sid}-copy", "messages": 12, "summaries": 7}
    assert await export(client, f"{sid}-copy") == renamed(original, sid, f"{sid}-copy")
    lines = parsed(original)
    assert {line["type"] for line in lines} == {"session", "message", "summary", "end"}
    assert [line["seq"] for line in lines if line["type"] == "message"] == list(range(1, 13))
    assert lines[9]["orphaned_at"] is not None and lines[10]["removed_at"] is not None
    fallback = next(line for line in lines if line.get("model") == FALLBACK_MODEL)
    assert fallback["covers"] == [[11, 12]] and fallback["first_message_seq"] == 11
    code, out, _ = await run_verify(database_url)
    assert code == 0, out


async def test_a_responses_session_comes_back_byte_for_byte(
    api: httpx.AsyncClient, sid: str, app_sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "format": "responses"})
    assert created.status_code == 201
    await append_items(
        api,
        sid,
        {"type": "message", "role": "user", "content": "weather in 東京?", "x": 1.5e300},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "k"}]},
        {"type": "function_call", "call_id": "f1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "sunny"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    )
    await fallback_summary(app_sessionmaker, sid, 1, 4)
    original = await export(api, sid)

    answer = await import_file(api, original, as_id=f"{sid}-copy")

    assert answer.status_code == 201, answer.text
    assert await export(api, f"{sid}-copy") == renamed(original, sid, f"{sid}-copy")
    items = [line["item"] for line in parsed(original) if line["type"] == "message"]
    assert items[0] == {
        "type": "message",
        "role": "user",
        "content": "weather in 東京?",
        "x": 1.5e300,
    }
    history = await api.get(f"/v1/sessions/{sid}-copy/history")
    assert (
        history.json()["context"]
        == (await api.get(f"/v1/sessions/{sid}/history")).json()["context"]
    )


async def test_an_import_keeps_the_files_session_id(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, sid, user("hello"), assistant("hi"))
    original = await export(api, sid)
    assert (await api.delete(f"/v1/sessions/{sid}")).status_code == 204

    answer = await import_file(api, original)

    assert answer.status_code == 201, answer.text
    assert answer.json()["id"] == sid
    assert await export(api, sid) == original


async def test_an_import_under_a_taken_id_answers_409(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, sid, user("hello"))
    answer = await import_file(api, await export(api, sid))
    assert_error(answer, 409, sid)


async def test_an_export_of_an_unknown_session_answers_404(api: httpx.AsyncClient) -> None:
    assert_error(await api.get("/v1/sessions/nobody-here/export"), 404, "nobody-here")


async def test_an_import_declared_as_json_answers_415(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, sid, user("hello"))
    body = await export(api, sid)
    answer = await api.post(
        "/v1/sessions/import", content=body, headers={"content-type": "application/json"}
    )
    assert_error(answer, 415, "application/x-ndjson")


@pytest.mark.parametrize(
    "settings_overrides", [{"max_request_bytes": 4000}], indirect=True, ids=["4000-bytes"]
)
async def test_an_import_larger_than_max_request_bytes_is_stored(
    client: httpx.AsyncClient, sid: str
) -> None:
    for part in range(4):
        await append(client, sid, *(user(f"message {part}.{n} " + "x" * 200) for n in range(8)))
    body = await export(client, sid)
    assert len(body) > 4000

    answer = await import_file(client, body, as_id=f"{sid}-copy")

    assert answer.status_code == 201, answer.text
    assert answer.json()["messages"] == 32


@pytest.mark.parametrize(
    "settings_overrides", [{"max_request_bytes": 4000}], indirect=True, ids=["4000-bytes"]
)
async def test_a_line_over_max_request_bytes_answers_413_naming_it(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await append(client, sid, user("short"), assistant("y" * 3000))
    lines = parsed(await export(client, sid))
    lines[2]["content"] = "y" * 5000

    answer = await import_file(client, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 413, "line 3")
    await assert_session_absent(client, f"{sid}-copy")


# --- across databases -----------------------------------------------------------------------


async def test_a_session_exported_from_sqlite_imports_into_postgresql(
    tmp_path: Path, postgres_available: bool
) -> None:
    async with (
        migrated_database("sqlite", tmp_path, postgres_available) as sqlite_url,
        migrated_database("postgresql", tmp_path, postgres_available) as postgres_url,
    ):
        source, target = (
            create_app(make_settings(sqlite_url)),
            create_app(make_settings(postgres_url)),
        )
        async with (
            source.router.lifespan_context(source),
            target.router.lifespan_context(target),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(source), base_url="http://localhost"
            ) as s,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(target), base_url="http://localhost"
            ) as t,
        ):
            await s.post("/v1/sessions", json={"id": "moved", "metadata": {"b": 1, "a": [2]}})
            sent = await append(s, "moved", user("hi", metadata={"z": 1, "y": 2}), tool_call("c"))
            await append(s, "moved", tool_result("c"), assistant("done"))
            await s.delete(f"/v1/sessions/moved/messages/{sent['messages'][0]['id']}")
            await fallback_summary(source.state.sessionmaker, "moved", 1, 3)
            original = await export(s, "moved")

            answer = await import_file(t, original)

            assert answer.status_code == 201, answer.text
            # PostgreSQL's JSONB keeps an object's keys in an order of its own
            assert _sorted(await export(t, "moved")) == _sorted(original)
        code, out, _ = await run_verify(postgres_url)
        assert code == 0, out


def _sorted(body: bytes) -> list[str]:
    return [json.dumps(line, sort_keys=True) for line in parsed(body)]


# --- refused files --------------------------------------------------------------------------


def _drop(index: int) -> Callable[[Lines], Lines]:
    def dropped(lines: Lines) -> Lines:
        copy = list(lines)
        del copy[index]
        return copy

    return dropped


def _set(index: int, **changes: Any) -> Callable[[Lines], Lines]:
    return lambda lines: [
        {**line, **changes} if at == index else line for at, line in enumerate(lines)
    ]


def _swap(a: int, b: int) -> Callable[[Lines], Lines]:
    def swapped(lines: Lines) -> Lines:
        copy = list(lines)
        copy[a], copy[b] = copy[b], copy[a]
        return copy

    return swapped


# The file of `refusable`: line 1 the session, lines 2..7 messages 1..6 (seq 3 a tombstone),
# line 8 the roll-up 1..4, lines 9 and 10 the halves it absorbed (1..2; 3..4, covering only 4),
# line 11 the end. Each case: how the file is broken, the line named, words of the refusal.
BROKEN: dict[str, tuple[Callable[[Lines], Lines] | bytes, int, str]] = {
    "not JSON": (b"not json", 3, "not JSON"),
    "a message without its role": (
        lambda lines: [
            {k: v for k, v in line.items() if k != "role"} if at == 2 else line
            for at, line in enumerate(lines)
        ],
        3,
        "role",
    ),
    "an unknown line type": (_set(1, type="note"), 2, "type"),
    "an expiry already past": (_set(0, expires_at="2001-01-01T00:00:00Z"), 1, "expires_at"),
    "a summary model the server does not allow": (
        _set(0, settings={"model": "openai/not-allowed-here"}),
        1,
        "settings.model: 'openai/not-allowed-here' is not allowed on this server",
    ),
    "no end line": (_drop(-1), 11, "without its `end` line"),
    "a message line lost": (_drop(3), 4, "seq 4 where 3 was expected"),
    "messages out of order": (_swap(2, 3), 3, "seq 3 where 2 was expected"),
    "end counts that differ": (_set(10, messages=7), 11, "counts 7 messages"),
    "a summary past the last seq": (_set(7, last_seq=9), 8, "not a range"),
    "a live summary covering a tombstone": (
        _set(7, covers=[[1, 4]], message_count=4),
        8,
        "covers seq 3, a removed message",
    ),
    "superseded_by naming no summary": (_set(8, superseded_by=9), 9, "names no earlier"),
    "a tombstone with content": (_set(3, content="back"), 4, "keeps no content"),
    "a line after the end": (lambda lines: [*lines, lines[1]], 12, "after the `end` line"),
    "a summary before the session line": (_swap(0, 7), 1, "before the `session` line"),
}


@pytest.fixture
async def refusable(api: httpx.AsyncClient, sid: str) -> Lines:
    """A six-message file with a tombstone at seq 3 and three summaries (a roll-up first)."""
    said = await append(
        api, sid, *(user(f"m{n}") if n % 2 else assistant(f"m{n}") for n in range(1, 7))
    )
    await api.delete(f"/v1/sessions/{sid}/messages/{said['messages'][2]['id']}")
    lines = parsed(await export(api, sid))
    lines[-1:-1] = [
        _summary(1, 1, 4, [[1, 2], [4, 4]], level=1),
        _summary(2, 1, 2, [[1, 2]], superseded_by=1),
        _summary(3, 3, 4, [[4, 4]], superseded_by=1),
    ]
    lines[-1]["summaries"] = 3
    return lines


def _summary(
    ref: int,
    first: int,
    last: int,
    covers: list[list[int]],
    level: int = 0,
    superseded_by: int | None = None,
) -> dict[str, Any]:
    at = "2026-01-01T00:00:00Z"
    return {
        "type": "summary",
        "ref": ref,
        "first_seq": first,
        "last_seq": last,
        "covers": covers,
        "first_message_seq": covers[0][0],
        "last_message_seq": covers[-1][1],
        "level": level,
        "superseded_by": superseded_by,
        "summary_text": "text",
        "summary_prompt": "prompt",
        "model": "m",
        "temperature": 0.0,
        "target_summary_tokens": 100,
        "keep_last_n": 0,
        "message_count": sum(b - a + 1 for a, b in covers),
        "approx_tokens": 1,
        "first_message_at": at,
        "last_message_at": at,
        "metadata": {},
        "created_at": at,
        "erased_at": None,
    }


async def test_the_file_built_for_refusals_is_itself_accepted(
    api: httpx.AsyncClient, sid: str, refusable: Lines, database_url: str
) -> None:
    answer = await import_file(api, unparsed(refusable), as_id=f"{sid}-copy")
    assert answer.status_code == 201, answer.text
    code, out, _ = await run_verify(database_url, "--session", f"{sid}-copy")
    assert code == 0, out


@pytest.mark.parametrize("case", list(BROKEN))
async def test_a_broken_file_is_refused_naming_its_line_and_nothing_is_stored(
    api: httpx.AsyncClient,
    sid: str,
    refusable: Lines,
    app_sessionmaker: async_sessionmaker[AsyncSession],
    case: str,
) -> None:
    broken, line, words = BROKEN[case]
    if isinstance(broken, bytes):
        body = unparsed(refusable[:2]) + broken + b"\n" + unparsed(refusable[2:])
    else:
        body = unparsed(broken(refusable))
    before = await rows(app_sessionmaker)

    answer = await import_file(api, body, as_id=f"{sid}-copy")

    assert_error(answer, 422, f"line {line}:", words)
    await assert_session_absent(api, f"{sid}-copy")
    assert await rows(app_sessionmaker) == before


async def test_an_empty_file_is_refused(api: httpx.AsyncClient) -> None:
    assert_error(await import_file(api, b""), 422, "line 1:", "empty")


async def test_a_refusal_after_stored_batches_stores_nothing(
    api: httpx.AsyncClient, sid: str, app_sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    for part in range(3):
        await append(api, sid, *(user(f"{part}.{n}") for n in range(500)))
    lines = parsed(await export(api, sid))
    lines[1400]["seq"] = 7  # after a thousand messages went to the database
    before = await rows(app_sessionmaker)

    answer = await import_file(api, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 422, "line 1401:", "seq 7 where 1400 was expected")
    assert await rows(app_sessionmaker) == before


async def test_an_export_reads_a_large_session_in_pages(api: httpx.AsyncClient, sid: str) -> None:
    for part in range(5):
        await append(api, sid, *(user(f"{part}.{n}") for n in range(500)))
    lines = parsed(await export(api, sid))
    assert [line["seq"] for line in lines[1:-1]] == list(range(1, 2501))
    assert lines[-1] == {"type": "end", "messages": 2500, "summaries": 0}


async def test_a_client_id_repeated_in_a_later_batch_is_refused_naming_its_line(
    api: httpx.AsyncClient, sid: str, app_sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    for part in range(3):
        said = (user(f"{part}.{n}", client_id=f"k{part}.{n}") for n in range(500))
        await append(api, sid, *said)
    lines = parsed(await export(api, sid))
    lines[1500]["client_id"] = lines[10]["client_id"]  # a thousand lines later, another batch
    before = await rows(app_sessionmaker)

    answer = await import_file(api, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 422, "line 1501:", "client_id is an earlier line's too")
    assert await rows(app_sessionmaker) == before
    await assert_session_absent(api, f"{sid}-copy")


# --- limits on an import --------------------------------------------------------------------


class Sent:
    """A request body sent in chunks as the app reads them, counting what it read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0

    async def stream(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk


def in_chunks(body: bytes, size: int) -> list[bytes]:
    return [body[at : at + size] for at in range(0, len(body), size)]


async def import_streamed(
    http: httpx.AsyncClient, sent: Sent, as_id: str, **headers: str
) -> httpx.Response:
    return await http.post(
        "/v1/sessions/import",
        content=sent.stream(),
        params={"id": as_id},
        headers={"content-type": "application/x-ndjson", **headers},
    )


async def exported_chat(http: httpx.AsyncClient, sid: str, messages: int) -> bytes:
    await append(http, sid, *(user(f"message {n} " + "x" * 80) for n in range(messages)))
    return await export(http, sid)


@pytest.mark.parametrize(
    "settings_overrides", [{"max_import_bytes": 2000}], indirect=True, ids=["2000-bytes"]
)
async def test_a_content_length_over_max_import_bytes_is_refused_before_the_body_is_read(
    client: httpx.AsyncClient, sid: str
) -> None:
    body = await exported_chat(client, sid, 30)
    sent = Sent(in_chunks(body, 100))

    answer = await import_streamed(
        client, sent, f"{sid}-copy", **{"content-length": str(len(body))}
    )

    assert_error(answer, 413, "2000 bytes", "MAX_IMPORT_BYTES")
    assert sent.read == 0
    await assert_session_absent(client, f"{sid}-copy")


@pytest.mark.parametrize(
    "settings_overrides", [{"max_import_bytes": 2000}], indirect=True, ids=["2000-bytes"]
)
async def test_a_streamed_body_over_max_import_bytes_is_refused_before_it_is_all_read(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    body = await exported_chat(client, sid, 30)
    sent = Sent(in_chunks(body, 100))
    before = await rows(sessionmaker)

    answer = await import_streamed(client, sent, f"{sid}-copy")

    assert_error(answer, 413, "2000 bytes", "MAX_IMPORT_BYTES")
    assert sent.read == 21  # the chunk that passed the limit, and none after it
    assert len(sent.chunks) > 21 * 2
    assert await rows(sessionmaker) == before


@pytest.mark.parametrize(
    "settings_overrides", [{"max_import_lines": 10}], indirect=True, ids=["10-lines"]
)
async def test_a_body_of_more_than_max_import_lines_is_refused_at_the_line_past_it(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    body = await exported_chat(client, sid, 30)
    sent = Sent(body.splitlines(keepends=True))
    before = await rows(sessionmaker)

    answer = await import_streamed(client, sent, f"{sid}-copy")

    assert_error(answer, 413, "10 lines", "MAX_IMPORT_LINES")
    assert sent.read == 11
    assert await rows(sessionmaker) == before


@pytest.mark.parametrize(
    "settings_overrides", [{"max_import_lines": 10}], indirect=True, ids=["10-lines"]
)
async def test_a_body_of_exactly_max_import_lines_is_stored(
    client: httpx.AsyncClient, sid: str
) -> None:
    body = await exported_chat(client, sid, 8)  # the session, 8 messages and the end line
    assert body.count(b"\n") == 10 and body.endswith(b"\n")

    answer = await import_file(client, body, as_id=f"{sid}-copy")

    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    "settings_overrides", [{"max_import_lines": 10}], indirect=True, ids=["10-lines"]
)
async def test_blank_lines_count_toward_max_import_lines(
    client: httpx.AsyncClient, sid: str
) -> None:
    first = (await exported_chat(client, sid, 1)).split(b"\n", 1)[0] + b"\n"
    sent = Sent([first, *(b"\n" for _ in range(1000))])

    answer = await import_streamed(client, sent, f"{sid}-copy")

    assert_error(answer, 413, "MAX_IMPORT_LINES")
    assert sent.read == 11
    await assert_session_absent(client, f"{sid}-copy")


async def test_a_blank_line_is_refused_at_once_naming_it(
    api: httpx.AsyncClient, sid: str, app_sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    lines = (await exported_chat(api, sid, 2)).splitlines(keepends=True)
    before = await rows(app_sessionmaker)

    answer = await import_file(api, b"".join([lines[0], b"\n", *lines[1:]]), as_id=f"{sid}-x")

    assert_error(answer, 422, "line 2:", "blank line")
    await assert_session_absent(api, f"{sid}-x")
    assert await rows(app_sessionmaker) == before


@pytest.mark.parametrize(
    "settings_overrides", [{"max_message_bytes": 2000}], indirect=True, ids=["2000-bytes"]
)
async def test_a_message_over_max_message_bytes_is_refused_as_its_append_is(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    lines = parsed(await exported_chat(client, sid, 3))
    large = user("y" * 3000)
    assert_error(await client.post(f"/v1/sessions/{sid}/messages", json={"messages": [large]}), 413)
    lines[2]["content"] = large["content"]
    before = await rows(sessionmaker)

    answer = await import_file(client, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 413, "line 3:", "MAX_MESSAGE_BYTES", "the limit is 2000")
    await assert_session_absent(client, f"{sid}-copy")
    assert await rows(sessionmaker) == before


@pytest.mark.parametrize(
    "settings_overrides", [{"max_message_bytes": 2000}], indirect=True, ids=["2000-bytes"]
)
async def test_an_item_over_max_message_bytes_is_refused_as_its_append_is(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await client.post("/v1/sessions", json={"id": sid, "format": "responses"})
    await append_items(client, sid, {"type": "message", "role": "user", "content": "hi"})
    lines = parsed(await export(client, sid))
    lines[1]["item"]["content"] = lines[1]["content"] = "y" * 3000
    before = await rows(sessionmaker)

    answer = await import_file(client, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 413, "line 2:", "MAX_MESSAGE_BYTES", "the limit is 2000")
    await assert_session_absent(client, f"{sid}-copy")
    assert await rows(sessionmaker) == before


@pytest.mark.parametrize(
    "settings_overrides", [{"max_metadata_bytes": 100}], indirect=True, ids=["100-bytes"]
)
async def test_message_metadata_over_max_metadata_bytes_is_refused_as_its_append_is(
    client: httpx.AsyncClient, sid: str
) -> None:
    lines = parsed(await exported_chat(client, sid, 2))
    lines[2]["metadata"] = {"note": "z" * 200}

    answer = await import_file(client, unparsed(lines), as_id=f"{sid}-copy")

    assert_error(answer, 413, "line 3:", "metadata", "MAX_METADATA_BYTES")
    await assert_session_absent(client, f"{sid}-copy")


@pytest.mark.parametrize("claimed", [0, 10**9])
async def test_an_imported_message_s_tokens_are_counted_again_not_read_from_the_file(
    api: httpx.AsyncClient, sid: str, claimed: int
) -> None:
    await append(api, sid, user("a long question " * 500), assistant("short"))
    lines = parsed(await export(api, sid))
    counted = lines[1]["token_count"]
    assert counted > 1000
    lines[1]["token_count"] = lines[2]["token_count"] = claimed

    answer = await import_file(api, unparsed(lines), as_id=f"{sid}-copy")

    assert answer.status_code == 201, answer.text
    copied = parsed(await export(api, f"{sid}-copy"))
    assert [line["token_count"] for line in copied[1:3]] == [
        line["token_count"] for line in parsed(await export(api, sid))[1:3]
    ]
    assert copied[1]["token_count"] == counted


async def test_an_import_waiting_for_its_body_holds_no_write_lock(
    api: httpx.AsyncClient, sid: str
) -> None:
    # the body is spooled before the import's transaction begins: on SQLite the process's
    # writers queue on one lock, which a slow client must not hold
    await append(api, sid, user("hello"))
    body = await export(api, sid)
    halfway, rest_sent = asyncio.Event(), asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield body[:10]
        halfway.set()
        await rest_sent.wait()
        yield body[10:]

    importing = asyncio.create_task(
        api.post(
            "/v1/sessions/import",
            content=slow_body(),
            params={"id": f"{sid}-copy"},
            headers={"content-type": "application/x-ndjson"},
        )
    )
    try:
        await asyncio.wait_for(halfway.wait(), 5)
        await asyncio.wait_for(append(api, f"{sid}-other", user("meanwhile")), 5)
    finally:
        rest_sent.set()
        answer = await importing
    assert answer.status_code == 201, answer.text
