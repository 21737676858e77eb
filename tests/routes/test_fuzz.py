"""Schemathesis against the service's own OpenAPI document, on a live loopback server.

Every operation gets generated requests, valid and invalid, with the API key; every answer
must be a non-5xx that conforms to the document (status code, content type, body schema,
and the checks below). One fresh database per backend; the server is the real
`python -m api` with API_KEYS set and summarization on (the offline `local` model).

Bounded for CI: `FUZZ_EXAMPLES` generated requests per operation (PRECIS_FUZZ_EXAMPLES
overrides), derandomized so a run is reproducible (PRECIS_FUZZ_RANDOM=1 explores anew).
"""

from __future__ import annotations

import copy
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from schemathesis import checks
from schemathesis.core.failures import AcceptedNegativeData, FailureGroup

from api.main import create_app
from tests.conftest import migrated_database
from tests.support import json_lines  # noqa: F401  (registers the import body's serializer)
from tests.support.live_server import LiveServer
from tests.support.openapi_bodies import body_is_valid

FUZZ_EXAMPLES = int(os.environ.get("PRECIS_FUZZ_EXAMPLES", "15"))
"""Generated requests per operation: about 30 s for the whole run on both databases."""

FUZZ_RANDOM = os.environ.get("PRECIS_FUZZ_RANDOM", "") == "1"

NOT_EXPRESSIBLE = [checks.positive_data_acceptance]
"""Checks left out: the service refuses (422, documented) some input that JSON Schema cannot
describe inside free-form JSON (`metadata`, Responses items): NUL characters and lone
surrogates (PostgreSQL stores neither), nesting deeper than 16, integers beyond 64 bits; so
"schema-valid but rejected" is expected there. Everything else the service enforces is in the
document (each role's message schema, the Responses item rules, `messages` or `items`, the
models this server allows), and every other check runs, negative_data_rejection included."""

SHARED_PATHS = ("/v1/sessions/import", "/v1/responses/input_tokens", "/v1/responses/compact")
SHARED_PATH_CHECKS = [checks.allow_header_conformance]
"""`POST /v1/sessions/import` is also `/v1/sessions/{session_id}` for the session id `import`,
whose GET, PATCH and DELETE the server serves (and `POST /v1/responses/input_tokens` and
`/compact` are `/v1/responses/{response_id}`, whose GET and DELETE it serves): a 405 there
rightly allows those methods too, where the document lists POST alone for the literal path."""

API_KEY = secrets.token_urlsafe(16)
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
async def fuzz_database(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_available: bool,
) -> Any:
    """A fresh migrated database, so generated data never meets other tests' data."""
    folder = tmp_path_factory.mktemp("fuzz")
    async with migrated_database(request.param, folder, postgres_available) as url:
        yield url


@pytest.fixture(scope="module")
def live_api(fuzz_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = Path(tmp_path_factory.mktemp("fuzz-log")) / "server.log"
    server = LiveServer(
        fuzz_database,
        log,
        {
            "api_keys": f"fuzz:{API_KEY}",
            "summary_message_limit": 5,
            "summary_keep_last_n": 1,
            "summary_workers": 1,
        },
    )
    with server:
        yield server.base_url
    assert "Traceback" not in log.read_text(), server.log_tail(80)


DOCUMENT = create_app().openapi()
"""The document the app serves at /openapi.json (built without starting the app)."""

schema = schemathesis.openapi.from_dict(copy.deepcopy(DOCUMENT))


@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=not FUZZ_RANDOM,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_conforms_to_its_openapi_document(case: Any, live_api: str) -> None:
    excluded = NOT_EXPRESSIBLE + (SHARED_PATH_CHECKS if case.path in SHARED_PATHS else [])
    try:
        case.call_and_validate(
            base_url=live_api, headers=AUTH, timeout=30, excluded_checks=excluded
        )
    except FailureGroup as found:
        if not all(_valid_after_all(failure, case) for failure in found.exceptions):
            raise


def _valid_after_all(failure: BaseException, case: Any) -> bool:
    """A "schema-violating request accepted" whose body the document accepts after all, and
    whose query does too once it is what a query string is: text (a generated `false` for a
    list of names is the name "false" on the wire)."""
    return (
        isinstance(failure, AcceptedNegativeData)
        and body_is_valid(DOCUMENT, case.path, case.method, case.body)
        and _query_valid_as_text(case)
    )


def _query_valid_as_text(case: Any) -> bool:
    operation = DOCUMENT["paths"][case.path][case.method.lower()]
    schemas = {
        parameter["name"]: parameter["schema"]
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "query"
    }
    for name, value in (case.query or {}).items():
        if name not in schemas:
            return False
        values = value if isinstance(value, list) else [value]
        texts = [json.dumps(item) if not isinstance(item, str) else item for item in values]
        schema = schemas[name]
        given: Any = texts if _takes_list(schema) else texts[-1]
        if not Draft202012Validator(schema).is_valid(given):
            return False
    return True


def _takes_list(schema: dict[str, Any]) -> bool:
    kinds = [schema, *schema.get("anyOf", [])]
    return any(kind.get("type") == "array" for kind in kinds)
