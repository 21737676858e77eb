"""What the README and docs/api.md tell a newcomer to do works as they say: the first request can
be run twice, a `curl -d` body is refused as documented, `make run` takes the port and host
the README names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
API_DOC = (ROOT / "docs" / "api.md").read_text()

FIRST_REQUEST = re.compile(r"## A first request\n.*?-d '(?P<body>\{.*?\})'", re.DOTALL)
"""The body the README's first request appends."""


def first_request_body() -> dict[str, object]:
    found = FIRST_REQUEST.search(README)
    assert found, "README.md has no first request with a body"
    body: dict[str, object] = json.loads(found["body"])
    return body


async def test_the_readme_s_first_request_run_twice_stores_each_message_once(
    api: httpx.AsyncClient, sid: str
) -> None:
    body = first_request_body()
    for _ in range(2):
        answer = await api.post(f"/v1/sessions/{sid}/messages", json=body)
        assert answer.status_code == 201, answer.text
    session = (await api.get(f"/v1/sessions/{sid}")).json()
    assert session["message_count"] == len(body["messages"])  # type: ignore[arg-type]


async def test_a_body_as_curl_d_sends_it_is_refused_as_the_docs_say(
    api: httpx.AsyncClient, sid: str
) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}  # `curl -d` without -H
    answer = await api.post(
        f"/v1/sessions/{sid}/messages", content=b'{"messages": []}', headers=form
    )
    assert answer.status_code == 415, answer.text
    bodies = next(line for line in API_DOC.split("\n- ") if line.startswith("**Bodies**"))
    said = " ".join(bodies.split())
    assert "`curl -d` sends `application/x-www-form-urlencoded`, so it gets 415" in said


def test_the_readme_names_the_port_and_host_make_run_takes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PORT \?=", makefile, re.MULTILINE)
    assert re.search(r"^HOST \?=", makefile, re.MULTILINE)
    assert "--host $(HOST) --port $(PORT)" in makefile
    assert re.search(r"`make run PORT=\d+ HOST=[\d.]+`", README)
