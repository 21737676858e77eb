"""Whether a request body is valid by the OpenAPI document: schemathesis's negative-data check
(ST201) sometimes mutates one branch of an `anyOf` into a value another branch accepts (an
array of a JSON value turned into a number), then reports the valid body's acceptance. Both
schemathesis tests drop exactly those reports, after checking the body themselves."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

JSON = "application/json"


def body_is_valid(document: dict[str, Any], path: str, method: str, body: Any) -> bool:
    """Whether `body` is valid for the JSON request body of `method path` in `document`
    (False when the operation takes none)."""
    operation = document["paths"].get(path, {}).get(method.lower(), {})
    schema = operation.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema")
    if schema is None:
        return False
    root = {**schema, "components": document.get("components", {})}
    return bool(Draft202012Validator(root).is_valid(body))
