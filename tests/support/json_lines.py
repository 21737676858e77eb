"""Schemathesis' serializer of `application/x-ndjson`, the import's body: registered on import,
by the schemathesis hooks (`schema_hooks`) and by the in-process fuzz test alike."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def json_lines(context: Any, value: Any) -> bytes:
    """An import's body: the generated `TransferLine` as a file of one line."""
    return json.dumps(value).encode() + b"\n"
