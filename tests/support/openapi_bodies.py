"""Whether a request body is valid by the OpenAPI document: schemathesis's negative-data check
(ST201) sometimes mutates one branch of an `anyOf` into a value another branch accepts (an
array of a JSON value turned into a number), then reports the valid body's acceptance. Both
schemathesis tests drop exactly those reports, after checking the body themselves."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator, validators  # type: ignore[import-untyped]

JSON = "application/json"

AS_PARSED = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)
"""JSON Schema read as the server parses JSON: a number written with a fraction or an exponent
is a float (`1e300` is kept as the float it is, in metadata too), not the integer JSON Schema
counts it as, which the document bounds to 64 bits; schemathesis mutates values into such
floats and reports their acceptance."""


def body_is_valid(document: dict[str, Any], path: str, method: str, body: Any) -> bool:
    """Whether `body` is valid for the JSON request body of `method path` in `document`
    (False when the operation takes none)."""
    operation = document["paths"].get(path, {}).get(method.lower(), {})
    schema = operation.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema")
    if schema is None:
        return False
    root = {**schema, "components": document.get("components", {})}
    return bool(AS_PARSED(root).is_valid(body))
