"""Schemathesis hooks for `tests/routes/test_schema_truth.py` (loaded through
SCHEMATHESIS_HOOKS): the rules of the API that JSON Schema cannot state, each named with why.

Everything a request body or parameter must be on its own is in the OpenAPI document. What
ties several objects of an array together, or depends on what the session holds, no schema
can say: such requests are kept out of the generated ones (`map_body`), or their failures
dropped (`filter_failure`), here and nowhere else.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any, TypeGuard

import schemathesis
from schemathesis import Case, HookContext, Response
from schemathesis.core.failures import Failure

from tests.support import json_lines  # noqa: F401  (registers the import body's serializer)
from tests.support.openapi_bodies import body_is_valid

APPEND = "POST /v1/sessions/{session_id}/messages"
"""The append, with two rules across the objects of an array, which JSON Schema cannot state
(`uniqueItems` compares whole objects, not one key): a `client_id` repeated in one batch must
repeat its message, and the `tool_calls` of one message have unique ids (else 422, as the
fields' descriptions say)."""

MAX_ID_CHARS = 256
"""The longest `client_id` or tool call id (`api.schemas.common.ClientId`, `ToolCallId`)."""

SUFFIX_CHARS = 8
"""What making an id unique appends to it: `~` and seven digits."""

STATE_DEPENDENT: dict[tuple[str, str], str] = {
    ("ST202", "BadForkPoint"): (
        "a fork point must be a message the session holds: a seq past its newest message, or "
        "a removed one, is refused (422 BadForkPoint, as documented); it depends on what the "
        "session holds, not on the request"
    ),
    ("ST202", "UnfaithfulView"): (
        "a history in the other format than the session holds is refused when a stored message "
        "has no exact shape in it (a reasoning item in the `openai` format): it depends on what "
        "the session holds, not on the request"
    ),
    ("ST302", "MessageNotFound"): (
        "popping a session just created, which holds no message yet, answers 404 "
        "MessageNotFound, as documented: the session is there, a message to pop is not"
    ),
}
"""(failure code, error name) -> why a schema cannot say it: those failures are dropped."""


@schemathesis.hook
def map_body(context: HookContext, body: Any) -> Any:
    """In an append, a valid `client_id` repeated with another message, and a valid tool call
    id repeated in one message, are made unique: the batch then says what the schema can
    check."""
    if context.operation is None or context.operation.label != APPEND:
        return body
    body = copy.deepcopy(body)  # the generated value stays as drawn, for shrinking
    batch = body.get("messages") or body.get("items") if isinstance(body, dict) else None
    if not isinstance(batch, list):
        return body
    _make_unique(batch, "client_id", repeats_allowed=True)
    for message in batch:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if isinstance(calls, list):
            _make_unique(calls, "id", repeats_allowed=False)
    return body


def _make_unique(objects: list[Any], key: str, repeats_allowed: bool) -> None:
    """Give each object whose valid id under `key` an earlier one has an id of its own (an
    exact repeat of the earlier object keeps it when `repeats_allowed`)."""
    first: dict[str, Any] = {}
    for index, entry in enumerate(objects):
        value = entry.get(key) if isinstance(entry, dict) else None
        if not _valid_id(value):
            continue
        seen = first.setdefault(value, entry)
        if seen is not entry and not (repeats_allowed and seen == entry):
            entry[key] = f"{value[: MAX_ID_CHARS - SUFFIX_CHARS]}~{index:07d}"


def _valid_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and "\x00" not in value


@schemathesis.hook
def filter_failure(
    context: HookContext, failure: Failure, case: Case[Any], response: Response
) -> bool:
    """Keep every failure but those `STATE_DEPENDENT` names, a refused `expires_at` that had
    passed (`_expired`), a "schema-violating" body the document accepts after all
    (`body_is_valid`), and the import's refusals and Allow header (`SHARED_PATH`): its
    document describes one line of a file, whose lines must make a whole session, in order,
    which no schema of one line can say."""
    if (failure.code, _error_name(response)) in STATE_DEPENDENT:
        return False
    if failure.code == "ST201" and _valid_after_all(case):
        return False
    if failure.code == "ST202" and _expired(case.body):
        return False
    return not (failure.code in ("ST202", "ST205") and case.operation.path == SHARED_PATH)


SHARED_PATH = "/v1/sessions/import"
"""`POST /v1/sessions/import` is also `/v1/sessions/{session_id}` for the session id `import`,
whose GET, PATCH and DELETE the server serves: a 405 there rightly allows all four methods,
where the document lists POST alone for the literal path."""


def _valid_after_all(case: Case[Any]) -> bool:
    operation = case.operation
    document = operation.schema.raw_schema
    return body_is_valid(document, operation.path, operation.method, case.body)


def _expired(body: Any) -> bool:
    """Whether a body's `expires_at` lies in the past: it must lie in the future (else 422), a
    rule of the moment the request is made, which no schema can state."""
    if not isinstance(body, dict) or not isinstance(body.get("expires_at"), str):
        return False
    try:
        moment = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    except ValueError:
        return False
    return moment.tzinfo is not None and moment <= datetime.now(UTC)


def _error_name(response: Response) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) else None
