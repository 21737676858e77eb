"""The OpenAPI document tells the truth: what the server refuses, the schema refuses too, and the
security it declares is the one the configured mode enforces.

The rules are checked one by one (the document refuses the body, the server answers 422 and
stores nothing), then schemathesis runs every operation with `--checks all` against a live
server in development mode and with API_KEYS, and must find nothing: no schema-valid request
refused, no schema-violating one accepted. The few refusals no schema can state are named,
with why, in `tests/support/schema_hooks.py`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from api.auth import OPEN_PATHS
from api.main import create_app
from tests.conftest import make_settings, run_alembic
from tests.support.live_server import REPO_ROOT, LiveServer
from tests.support.openapi_bodies import body_is_valid

EXCLUDED_PATHS = (
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1/responses/compact",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
)
"""Operations schemathesis leaves out: the model endpoints call an upstream model, which no
generated request should reach, and their bodies are the providers' own wires (their official
clients are the judge: tests/openai_api, tests/client), declared loosely here. Every other
operation runs, those added later included."""

SEED = 1
"""Schemathesis' seed: a run is reproducible (`st run --seed 1`)."""

MAX_EXAMPLES = 15
"""Generated requests per operation and phase: both modes run in about a minute."""

RUN_TIMEOUT_SECONDS = 300.0
"""Longest a schemathesis run may take before the test fails."""

ANSWER_CHARS = 160
"""How much of a failing answer's body a failure line shows."""

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
"""The CLI of the test environment's schemathesis."""

SERVER_SETTINGS: dict[str, Any] = {"summary_workers": 0}
"""No background worker: what a request does is all that happens (compact still summarizes
inline, with the offline `local` model)."""


def _document(api_keys: str = "") -> dict[str, Any]:
    app = create_app(make_settings("sqlite+aiosqlite:///unused.db", api_keys=api_keys))
    return app.openapi()


DOCUMENT = _document()


def _validator(schema_name: str, document: dict[str, Any] = DOCUMENT) -> Draft202012Validator:
    """A JSON Schema validator of one component of the document, its references resolved."""
    root = {"$ref": f"#/components/schemas/{schema_name}", "components": document["components"]}
    return Draft202012Validator(root)


ITEM_BODIES: dict[str, dict[str, Any]] = {
    "an empty type": {"type": "", "role": "user", "content": "hi"},
    "a type that is a number": {"type": 5, "role": "user", "content": "hi"},
    "a null type": {"type": None, "role": "user", "content": "hi"},
    "a NUL in a key": {"role": "user", "content": "hi", "note\x00": 1},
    "a NUL in a value": {"role": "user", "content": "hi", "note": "a\x00b"},
}
"""Responses items the server refuses for the reason named."""


@pytest.mark.parametrize("reason", ITEM_BODIES)
def test_an_item_the_server_refuses_is_invalid_in_the_document(reason: str) -> None:
    item = ITEM_BODIES[reason]
    assert not _validator("ItemIn").is_valid({"item": item}), reason
    fine = {key: value for key, value in item.items() if key in ("role", "content")}
    assert _validator("ItemIn").is_valid({"item": fine})


METADATA: dict[str, Any] = {
    "a NUL in a key": {"a\x00b": 1},
    "a NUL in a nested key": {"outer": [{"in\x00ner": True}]},
    "a NUL in a value": {"note": "a\x00b"},
    "an integer beyond 64 bits": {"big": 2**63},
    "a negative integer beyond 64 bits": {"small": -(2**63)},
}
"""Metadata the server refuses for the reason named."""

METADATA_CARRIERS: dict[str, dict[str, Any]] = {
    "SessionCreate": {},
    "SessionUpdate": {},
    "ItemIn": {"item": {"role": "user", "content": "hi"}},
    "UserMessageIn": {"role": "user", "content": "hi"},
}
"""Every kind of request schema carrying `metadata`, with what else it needs."""


@pytest.mark.parametrize("schema_name", METADATA_CARRIERS)
@pytest.mark.parametrize("reason", METADATA)
def test_metadata_the_server_refuses_is_invalid_in_the_document(
    schema_name: str, reason: str
) -> None:
    base = METADATA_CARRIERS[schema_name]
    validator = _validator(schema_name)
    assert not validator.is_valid({**base, "metadata": METADATA[reason]}), reason
    storable = {"a": "b", "n": 2**63 - 1, "x": 1.5, "deep": [{"k": None}]}
    assert validator.is_valid({**base, "metadata": storable})


def test_text_in_a_chat_message_says_it_has_no_nul() -> None:
    message = {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        "client_id": "m1",
    }
    validator = _validator("AssistantMessageIn")
    assert validator.is_valid(message)
    for broken in (
        {**message, "content": "o\x00k"},
        {**message, "client_id": "m\x001"},
        {**message, "tool_calls": [{"id": "c\x001", "function": {"name": "f", "arguments": ""}}]},
    ):
        assert not validator.is_valid(broken), broken


REFUSED_APPENDS: dict[str, dict[str, Any]] = {
    **{
        f"an item with {reason}": {"items": [{"item": item}]}
        for reason, item in ITEM_BODIES.items()
    },
    **{
        f"an item's metadata with {reason}": {
            "items": [{"item": {"role": "user", "content": "hi"}, "metadata": metadata}]
        }
        for reason, metadata in METADATA.items()
    },
    "an item's client_id with a NUL": {
        "items": [{"item": {"role": "user", "content": "hi"}, "client_id": "a\x00b"}]
    },
}
"""Appends the document now refuses; the server refuses them on both databases."""


@pytest.mark.parametrize("reason", REFUSED_APPENDS)
async def test_the_server_refuses_what_the_document_refuses(
    api: httpx.AsyncClient, sid: str, reason: str
) -> None:
    body = REFUSED_APPENDS[reason]
    assert not _validator("AppendRequest").is_valid(body), reason
    answer = await api.post(f"/v1/sessions/{sid}/messages", json=body)
    assert answer.status_code == 422, answer.text
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404  # nothing stored


def _security(document: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The security of the probes' operations, and of every other operation."""
    probes: list[Any] = []
    guarded: list[Any] = []
    for path, operations in document["paths"].items():
        for operation in operations.values():
            (probes if path in OPEN_PATHS else guarded).append(operation.get("security"))
    return probes, guarded


def test_without_api_keys_the_document_makes_the_key_optional() -> None:
    probes, guarded = _security(DOCUMENT)
    assert probes == [None, None]
    assert guarded and all(value == [{}, {"HTTPBearer": []}] for value in guarded)
    scheme = DOCUMENT["components"]["securitySchemes"]["HTTPBearer"]
    assert "Optional" in scheme["description"]


def test_with_api_keys_the_document_requires_the_key() -> None:
    document = _document(api_keys="tenant:a-key")
    probes, guarded = _security(document)
    assert probes == [None, None]
    assert guarded and all(value == [{"HTTPBearer": []}] for value in guarded)
    assert "a-key" not in json.dumps(document)


def test_a_64_bit_integer_bound_is_written_exactly() -> None:
    """In `StoredValue` (`-Input` and `-Output` where an answer, an export, serves it too)."""
    schemas = DOCUMENT["components"]["schemas"]
    names = [name for name in schemas if name.split("-")[0] == "StoredValue"]
    assert names
    for name in names:
        integer = next(
            option for option in schemas[name]["anyOf"] if option.get("type") == "integer"
        )
        assert integer["exclusiveMaximum"] == 2**63
        assert isinstance(integer["exclusiveMaximum"], int)
        assert integer["exclusiveMinimum"] == -(2**63)


# --- schemathesis over every operation, in both modes ------------------------------------------


def _failures(report: Path) -> list[str]:
    """Each failed check of the run's NDJSON report: code, operation, status, answer."""
    found: list[str] = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if finished is None:
            continue
        recorder = finished["recorder"]
        for case_id, checks in recorder.get("checks", {}).items():
            response = (recorder.get("interactions", {}).get(case_id) or {}).get("response") or {}
            for check in checks:
                if check.get("status") != "failure":
                    continue
                failure = check["failure_info"]["failure"]
                found.append(
                    f"{failure['code']} {failure['title']}: {failure['operation']} -> "
                    f"{response.get('status_code')} {_answer(response)}"
                )
    return sorted(set(found))


def _answer(response: dict[str, Any]) -> str:
    """The start of a recorded answer's body: what the server said."""
    content = response.get("content") or {}
    raw = base64.b64decode(content.get("$base64", "")) if isinstance(content, dict) else b""
    return raw.decode(errors="replace")[:ANSWER_CHARS]


def _schemathesis(base_url: str, workdir: Path, headers: tuple[str, ...] = ()) -> list[str]:
    """Run `st run --checks all` over the served document; the failures it found."""
    report = workdir / "report.ndjson"
    command = [str(SCHEMATHESIS), "run", f"{base_url}/openapi.json", "--checks", "all"]
    command += ["--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1"]
    command += ["--generation-database", "none", "--no-color"]
    command += ["--report", "ndjson", "--report-ndjson-path", str(report)]
    for path in EXCLUDED_PATHS:
        command += ["--exclude-path", path]
    for header in headers:
        command += ["--header", header]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.support.schema_hooks",
        "PYTHONPATH": str(REPO_ROOT),
    }
    run = subprocess.run(
        command,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    failures = _failures(report) if report.exists() else []
    if run.returncode != 0 and not failures:
        failures = [f"schemathesis exited {run.returncode}:\n{run.stdout[-4000:]}{run.stderr}"]
    return failures


def _served_run(tmp_path: Path, settings: dict[str, Any], headers: tuple[str, ...]) -> list[str]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'precis.db'}"
    asyncio.run(run_alembic(url, "head"))
    with LiveServer(url, tmp_path / "server.log", {**SERVER_SETTINGS, **settings}) as server:
        failures = _schemathesis(server.base_url, tmp_path, headers)
    assert "Traceback" not in server.log_tail(200), server.log_tail(80)
    return failures


def test_schemathesis_finds_no_disagreement_in_development_mode(tmp_path: Path) -> None:
    failures = _served_run(tmp_path, {"api_keys": ""}, ())
    assert failures == [], "\n".join(failures)


def test_schemathesis_finds_no_disagreement_with_api_keys(tmp_path: Path) -> None:
    key = secrets.token_urlsafe(16)
    failures = _served_run(tmp_path, {"api_keys": f"fuzz:{key}"}, (f"Authorization: Bearer {key}",))
    assert failures == [], "\n".join(failures)


def test_a_body_the_negative_data_check_mutated_into_another_branch_is_valid() -> None:
    # ST201 reported these bodies as schema-violating (an array of a JSON value turned into a
    # number); a number is a JSON value too, so both schemathesis tests drop such reports
    document = create_app().openapi()
    mutated = {"messages": [{"role": "developer", "content": "x", "metadata": {"k": 2.25e-262}}]}
    assert body_is_valid(document, "/v1/sessions/{session_id}/messages", "POST", mutated)
    items = {"items": [{"type": "reasoning", "summary": [], "k": 0.5}]}
    assert body_is_valid(document, "/v1/conversations", "POST", items)
    assert not body_is_valid(document, "/v1/conversations", "POST", {"items": 5})
    assert not body_is_valid(document, "/v1/sessions/{session_id}/messages", "POST", {"x": 1})
