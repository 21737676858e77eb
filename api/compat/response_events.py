"""The events of a streamed Responses API call as Precis relays them, and its ids."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from api.openai_errors import error_type
from api.upstream import UpstreamFailed


async def relayed(
    events: AsyncIterator[dict[str, Any]], count: Callable[[str], None], passed_through: bool
) -> AsyncIterator[dict[str, Any]]:
    """The model's events; a failure mid-stream becomes the Responses API's `error` event.
    `count` is told the outcome (`passed_through` at the end of such a stream, `model_failed`)."""
    try:
        async for event in events:
            yield event
        if passed_through:
            count("passed_through")
    except UpstreamFailed as exc:
        count("model_failed")
        # the Responses API's `error` event, and the `error` object the SDKs raise from
        yield {
            "type": "error",
            "code": exc.code,
            "message": exc.message,
            "param": exc.param,
            "error": {
                "type": error_type(exc.status),
                "code": exc.code,
                "message": exc.message,
                "param": exc.param,
            },
        }


async def with_response_id(
    events: AsyncIterator[dict[str, Any]], response_id: str
) -> AsyncIterator[dict[str, Any]]:
    """A passed-through stream's events, its response carrying Precis's id."""
    async for event in events:
        response = event.get("response")
        yield (
            {**event, "response": {**response, "id": response_id}}
            if isinstance(response, dict)
            else event
        )


def new_id(prefix: str) -> str:
    """An id shaped like OpenAI's: the prefix and 48 hex characters."""
    return f"{prefix}_{uuid.uuid4().hex}{uuid.uuid4().hex[:16]}"
