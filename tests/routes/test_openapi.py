"""The OpenAPI document describes every operation and field, and /docs works offline."""

from __future__ import annotations

import re
from typing import Any

import httpx

from api.main import create_app

DOCUMENT: dict[str, Any] = create_app().openapi()


def undescribed_operations() -> list[str]:
    return [
        f"{method.upper()} {path}"
        for path, operations in DOCUMENT["paths"].items()
        if path.startswith("/v1")
        for method, operation in operations.items()
        if not operation.get("description")
    ]


def undescribed_fields() -> list[str]:
    missing = []
    for name, schema in DOCUMENT["components"]["schemas"].items():
        if name in {"HTTPValidationError", "ValidationError"}:
            continue  # FastAPI's own, never answered (422 answers ErrorBody)
        for field, spec in schema.get("properties", {}).items():
            if not spec.get("description"):
                missing.append(f"{name}.{field}")
    return missing


def test_every_v1_operation_has_a_description() -> None:
    assert undescribed_operations() == []


def test_every_schema_field_has_a_description() -> None:
    assert undescribed_fields() == []


def test_a_tool_message_requires_tool_call_id_in_the_schema() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    assert "tool_call_id" in schemas["ToolMessageIn"]["required"]
    assert schemas["UserMessageIn"]["properties"]["tool_call_id"].get("type") == "null"
    messages = schemas["AppendRequest"]["properties"]["messages"]
    union = next(option for option in messages["anyOf"] if option.get("type") == "array")
    assert union["items"]["discriminator"]["propertyName"] == "role"


async def test_docs_load_nothing_from_another_host(client: httpx.AsyncClient) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(asset.startswith("/") for asset in assets), assets
    for asset in assets:
        answer = await client.get(asset)
        assert answer.status_code == 200, asset
    assert "http://" not in page.text.replace("http://localhost", "")
    assert "https://" not in page.text


def test_the_document_says_what_this_server_allows() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    model = schemas["SummaryOverrides"]["properties"]["model"]
    names = next(option for option in model["anyOf"] if option.get("type") == "string")
    assert "local" in names["enum"]
    assert {"required": ["items"], "properties": {"items": {"type": "array"}}} in schemas[
        "AppendRequest"
    ]["oneOf"]
    item_rules = schemas["ItemIn"]["properties"]["item"]["allOf"]
    function_call = next(
        rule
        for rule in item_rules
        if rule["if"].get("properties", {}).get("type") == {"const": "function_call"}
    )
    assert function_call["then"]["required"] == ["call_id", "name", "arguments"]
