"""Which session a Chat Completions or Messages request belongs to: the session ladder.

In this order: the `X-Precis-Session` header (the session id as it is); a field the wire
already has (`metadata.session_id` on OpenAI's, `metadata.user_id` on Anthropic's; not
`prompt_cache_key`, which OpenAI documents as shared by requests with a common prefix), used
as it is when it is a valid session id, else as the hash of it; then, with
`MEMORY_IDENTIFY=prefix`, a fingerprint of the tenant, the system prompt and the first user
message. Without any of them the request is a plain proxy call: nothing is stored.

A session named by a body field or a fingerprint is one a user (or an app) names: it holds one
of their conversations, known by its start (system prompt and first user message), and a request
that starts otherwise is another of them, kept in a session of its own (`another_conversation`),
where a session the header names branches.
Claude Code, which names its session in `metadata.user_id`, asks the model for a title of the
conversation with the same `user_id` and a system prompt of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from api.compat.reconcile import canonical
from api.openai_errors import OpenAIError
from api.schemas.common import SESSION_ID_PATTERN

SESSION_HEADER = "x-precis-session"
"""The header that names the session of a wire request, whatever the wire."""

_SESSION_ID = re.compile(SESSION_ID_PATTERN)

HASHED_PREFIX = "wire-"
"""A session id made from a body field that is not a session id itself (too long, or with
other characters): the prefix and 40 hex digits of its hash."""

FINGERPRINT_PREFIX = "prefix-"
"""A session id made from the fingerprint of the conversation's start (`MEMORY_IDENTIFY`)."""

HASHED_DIGITS = 40


def session_id(
    tenant: str,
    header: str | None,
    fields: Sequence[tuple[str, object]],
    messages: Sequence[Mapping[str, Any]],
    by_prefix: bool,
) -> str | None:
    """The session of the request, or None for a plain proxy call.

    `header`: the `X-Precis-Session` value (checked by the route: a session id); `fields`:
    the wire's own candidate fields, as `(param, value)` in its order (an integer is taken as
    its digits; any other value but a string is a 400 naming it); `messages`: the request's
    chat messages."""
    if header:
        return header
    for param, value in fields:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if value is not None and not isinstance(value, str):
            raise OpenAIError(400, f"{param} must be a string", param=param)
        if value:
            return value if _SESSION_ID.fullmatch(value) else _hashed(HASHED_PREFIX, [value])
    if by_prefix:
        return _fingerprint(tenant, messages)
    return None


def another_conversation(
    tenant: str, session_id: str, messages: Sequence[Mapping[str, Any]]
) -> str:
    """The session of a conversation that starts otherwise than the one the session
    `session_id` names for a user holds: named by that name and the conversation's start, its
    leading system messages and first user message as a resend is matched by
    (`api.compat.reconcile.canonical`: cache marks and SDK-only fields left out)."""
    leading = 0
    while leading < len(messages) and messages[leading].get("role") in ("system", "developer"):
        leading += 1
    first_user = next((m for m in messages[leading:] if m.get("role") == "user"), None)
    start = [canonical(message) for message in messages[:leading]]
    if first_user is not None:
        start.append(canonical(first_user))
    return _hashed(HASHED_PREFIX, [tenant, session_id, [part.decode() for part in start]])


def starts_otherwise(messages: Sequence[Mapping[str, Any]], matched: int) -> bool:
    """Whether a request whose first `matched` messages a session holds starts otherwise than
    the session's conversation: they end before its first user message."""
    first_user = next(
        (index for index, message in enumerate(messages) if message.get("role") == "user"),
        len(messages),
    )
    return matched <= first_user


def _fingerprint(tenant: str, messages: Sequence[Mapping[str, Any]]) -> str | None:
    # hashed as first defined (the raw contents): its ids name the sessions stored with it
    system = [m.get("content") for m in messages if m.get("role") in ("system", "developer")]
    first_user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    if first_user is None:
        return None
    return _hashed(FINGERPRINT_PREFIX, [tenant, system, first_user])


def _hashed(prefix: str, values: list[Any]) -> str:
    try:
        encoded = orjson.dumps(values, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson cannot encode (a lone surrogate, an integer past 64 bits)
        try:
            encoded = json.dumps(values, sort_keys=True, default=repr).encode()
        except RecursionError:
            encoded = repr(values).encode()
    return prefix + hashlib.sha256(encoded).hexdigest()[:HASHED_DIGITS]
