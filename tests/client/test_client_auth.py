"""The API key reaches a server that requires one, on both databases.

`served_app` always serves without API_KEYS, so this module serves the app with keys from a
uvicorn server in a thread of the test process, on a loopback port: the same HTTP path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from precis_client import AsyncPrecisClient, PrecisClient, SessionNotFound, Unauthorized

from api.main import create_app
from tests.conftest import QUIET, make_settings
from tests.support.live_server import free_port

KEY = "key-of-tenant-a"


@pytest.fixture(scope="module")
def keyed_url(database_url: str) -> Iterator[str]:
    """A Precis server requiring `KEY` (tenant `a`), or `other-key` (tenant `b`)."""
    settings = make_settings(database_url, api_keys=f"a:{KEY},b:other-key", **QUIET)
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_api_key_is_sent_as_a_bearer_token(keyed_url: str, sid: str) -> None:
    with PrecisClient(keyed_url, api_key=KEY) as client:
        client.append_messages(sid, [{"role": "user", "content": "hi"}])
        assert client.get_session(sid)["message_count"] == 1


async def test_the_async_client_sends_it_too(keyed_url: str, sid: str) -> None:
    async with AsyncPrecisClient(keyed_url, api_key=KEY) as client:
        await client.create_session(sid)
        assert (await client.get_session(sid))["id"] == sid


@pytest.mark.parametrize("key", [None, "wrong-key"], ids=["no key", "wrong key"])
def test_a_missing_or_wrong_key_raises_unauthorized(
    keyed_url: str, sid: str, key: str | None
) -> None:
    with PrecisClient(keyed_url, api_key=key) as client, pytest.raises(Unauthorized) as raised:
        client.create_session(sid)
    assert raised.value.status == 401


def test_another_tenants_session_is_not_found(keyed_url: str, sid: str) -> None:
    with PrecisClient(keyed_url, api_key=KEY) as owner:
        owner.create_session(sid)
    with PrecisClient(keyed_url, api_key="other-key") as other, pytest.raises(SessionNotFound):
        other.get_session(sid)
