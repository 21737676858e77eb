"""Size limits: a pure ASGI middleware for request bodies (413), and the metadata limit."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import PayloadTooLarge


class BodyTooLarge(HTTPException):
    """Raised while a body streams in past the limit.

    An HTTPException, so FastAPI passes it on as it reads the body (other errors become a 400)
    and the app's handler answers 413.
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body over {max_bytes} bytes")


def check_metadata_size(metadata: Any, where: str, max_bytes: int) -> None:
    """Refuse (413) a metadata object whose JSON encoding is over `max_bytes`."""
    if metadata is None:
        return
    size = len(json.dumps(metadata, ensure_ascii=False).encode())
    if size > max_bytes:
        raise PayloadTooLarge(f"{where} is {size} bytes; the limit is {max_bytes}")


IMPORT_PATH = "/v1/sessions/import"
"""Where a session is imported (`api.routes.transfer`)."""

STREAMED_BODY_PATHS = frozenset({IMPORT_PATH})
"""Routes that read their body as a stream of lines, never whole (`api.transfer.lines`): no limit
on the body, each line held to the limit instead."""


class BodySizeLimit:
    """Refuses a body larger than the limit, by Content-Length or while it streams in.

    The limit is `max_bytes` if given, else the app's `settings.max_request_bytes`, read per
    request: the settings are only known once the lifespan has started. The routes of
    `STREAMED_BODY_PATHS` hold each line of their body to it instead.
    """

    def __init__(self, app: ASGIApp, max_bytes: int | None = None) -> None:
        self.app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in STREAMED_BODY_PATHS:
            await self.app(scope, receive, send)
            return
        max_bytes: int = self._max_bytes or scope["app"].state.settings.max_request_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > max_bytes):
                await _reject(send, max_bytes)
                return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise BodyTooLarge(max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await _reject(send, max_bytes)


async def _reject(send: Send, max_bytes: int) -> None:
    body = json.dumps(
        {"error": "PayloadTooLarge", "detail": f"request body over {max_bytes} bytes"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
