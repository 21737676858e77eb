"""A loopback TCP proxy in front of PostgreSQL that can cut a connection around its COMMIT.

A connection lost while COMMIT is under way leaves the client not knowing whether the
transaction landed. `pg_terminate_backend` cannot aim at that instant; this proxy can:

- `cut_after_commit`: the COMMIT reaches the server, which commits and answers; the answer is
  dropped and the connection closed (the client sees a lost connection, the data is stored);
- `cut_before_commit`: the COMMIT is dropped and the connection closed (the server rolls the
  transaction back).

Each cut is armed for the next COMMIT only. Clients must connect without TLS (`ssl=disable`)
so the proxy can read the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

from sqlalchemy.engine import make_url

COMMIT_MESSAGE = b"Q\x00\x00\x00\x0cCOMMIT;\x00"
"""asyncpg's COMMIT: a simple Query message ('Q', length 12, "COMMIT;" and its NUL)."""

Cut = Literal["cut_after_commit", "cut_before_commit"]


class CommitCuttingProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._armed: Cut | None = None
        self.cuts = 0
        self.port = 0

    def arm(self, cut: Cut) -> None:
        """Cut the connection that sends the next COMMIT, as `cut` says."""
        self._armed = cut

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
                if COMMIT_MESSAGE in chunk and self._armed is not None:
                    cut, self._armed = self._armed, None
                    self.cuts += 1
                    if cut == "cut_after_commit":
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
    """Read the server's answer to the COMMIT, up to its ReadyForQuery ('Z'): committed."""
    while True:
        kind = await server_in.readexactly(1)
        length = int.from_bytes(await server_in.readexactly(4), "big")
        await server_in.readexactly(length - 4)
        if kind == b"Z":
            return


@contextlib.asynccontextmanager
async def commit_cutting_proxy(database_url: str) -> AsyncIterator[CommitCuttingProxy]:
    url = make_url(database_url)
    proxy = CommitCuttingProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
