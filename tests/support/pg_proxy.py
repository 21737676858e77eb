"""A loopback TCP proxy in front of PostgreSQL that can cut a connection around a statement.

A connection lost while a statement that commits (an autocommit statement, or COMMIT) is
under way leaves the client not knowing whether it landed. `pg_terminate_backend` cannot aim
at that instant; this proxy can. It watches what clients send for `marker` (bytes of the
statement or of its parameters, such as a session id):

- `cut_after`: the statement reaches the server, which runs it and answers; the answer is
  dropped and the connection closed (the client sees a lost connection, the data is stored);
- `cut_before`: the statement is dropped and the connection closed (nothing ran).

Each cut is armed for the next message carrying its marker only. Clients must connect without
TLS (`ssl=disable`) so the proxy can read the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

from sqlalchemy.engine import make_url

Cut = Literal["cut_after", "cut_before"]


class CuttingProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._armed: tuple[Cut, bytes] | None = None
        self.cuts = 0
        self.port = 0

    def arm(self, cut: Cut, marker: bytes) -> None:
        """Cut the connection that next sends `marker`, as `cut` says."""
        self._armed = (cut, marker)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def url(self, database_url: str) -> str:
        """`database_url` routed through this proxy, without TLS."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        url = url.update_query_dict({"ssl": "disable"})
        return url.render_as_string(hide_password=False)

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        server_in, server_out = await asyncio.open_connection(*self._upstream)
        to_client = asyncio.create_task(_pipe(server_in, client_out))
        try:
            while chunk := await client_in.read(65536):
                if self._armed is not None and self._armed[1] in chunk:
                    (cut, _marker), self._armed = self._armed, None
                    self.cuts += 1
                    if cut == "cut_after":
                        to_client.cancel()  # from here the server's answer goes nowhere
                        await asyncio.gather(to_client, return_exceptions=True)
                        server_out.write(chunk)
                        await server_out.drain()
                        await _read_answer(server_in)
                    break
                server_out.write(chunk)
                await server_out.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            to_client.cancel()
            for writer in (client_out, server_out):
                with contextlib.suppress(Exception):
                    writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _read_answer(server_in: asyncio.StreamReader) -> None:
    """Read the server's answer, up to its ReadyForQuery ('Z'): the statement has ended."""
    while True:
        kind = await server_in.readexactly(1)
        length = int.from_bytes(await server_in.readexactly(4), "big")
        await server_in.readexactly(length - 4)
        if kind == b"Z":
            return


@contextlib.asynccontextmanager
async def cutting_proxy(database_url: str) -> AsyncIterator[CuttingProxy]:
    url = make_url(database_url)
    proxy = CuttingProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
