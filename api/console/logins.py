"""The console's logins: a random token per login in the browser's cookie, its sha256 digest
in `console_logins` (`api.store.console_logins`), so that a login holds on every replica and
ends when it expires or its browser logs out; the same-origin check of the forms that log in
and out; and the tenant a request's cookie names.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from datetime import timedelta
from urllib.parse import urlsplit

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import CONSOLE_COOKIE, TENANT_SCOPE_KEY
from api.db.models import utcnow
from api.db.transactions import Database
from api.store import console_logins

TOKEN_BYTES = 32
"""Random bytes of a login's token (256 bits: guessing one is hopeless, and the digest kept of
it opens nothing)."""

DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port an origin without one names."""

REFUSED = "a form posted from another site is refused"
"""How every refusal of `cross_site` begins."""


def token_hash(token: str) -> str:
    """What the database keeps of a token: its digest, so a copy of the table opens nothing."""
    return hashlib.sha256(token.encode()).hexdigest()


def cross_site(request: Request) -> str | None:
    """Why a form posted to the console (log in, log out) is refused as another site's; None
    when it comes from the console's own pages, or from a client that is not a browser (which
    sends neither `Origin` nor `Sec-Fetch-Site`).

    `Origin` must be this server's own scheme://host[:port]. `Origin: null` is what the
    console's own forms send (its pages ask for no referrer), but so can a page of any site
    (with the same referrer policy, or sandboxed): it passes only when the browser's Fetch
    Metadata says the post is same-origin, and a browser that sends none is refused.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if fetch_site not in (None, "same-origin", "none"):
        return f"{REFUSED} (Sec-Fetch-Site: {fetch_site[:40]})"
    if origin is None:
        return None
    if origin == "null":
        if fetch_site == "same-origin":
            return None
        return f"{REFUSED}: Origin null, and the browser does not say it is this site's"
    own = f"{request.url.scheme}://{request.url.netloc}"
    if _origin(origin) is None or _origin(origin) != _origin(own):
        return f"{REFUSED}: Origin {origin[:100]} is not this server's, {own[:100]}"
    return None


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """Scheme, host and port of an origin (the default port named); None if it names none."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    return None if not parts.hostname else (parts.scheme, parts.hostname, port)


async def signed_in_tenant(request: Request, db: AsyncSession) -> str | None:
    """The tenant whose console the request may see, read in `db`; None: ask for a key.

    Development mode: the tenant `KeyGate` let through (its loopback rules ran). With API_KEYS:
    the tenant of the unexpired login whose token the cookie holds, while that tenant still
    has a key (a tenant taken out of API_KEYS loses its logins with its keys).
    """
    keys: Mapping[str, str] = request.app.state.tenant_keys
    if not keys:
        tenant = request.scope.get(TENANT_SCOPE_KEY)
        return tenant if isinstance(tenant, str) else None
    token = request.cookies.get(CONSOLE_COOKIE)
    if not token:
        return None
    tenant = await console_logins.login_tenant(db, token_hash(token), utcnow())
    return tenant if tenant is not None and tenant in keys.values() else None


async def log_in(database: Database, tenant: str, ttl_seconds: float) -> str:
    """Store a new login of `tenant` lasting `ttl_seconds` (deleting the expired ones in the
    same transaction); its token, for the cookie."""
    token = secrets.token_urlsafe(TOKEN_BYTES)

    async def store(db: AsyncSession) -> None:
        now = utcnow()
        await console_logins.delete_expired_logins(db, now)
        expires_at = now + timedelta(seconds=ttl_seconds)
        await console_logins.add_login(db, token_hash(token), tenant, now, expires_at)

    await database.write(store)
    return token


async def log_out(database: Database, token: str) -> None:
    """End the login of `token`, on every replica."""

    async def end(db: AsyncSession) -> None:
        await console_logins.end_login(db, token_hash(token))

    await database.write(end, repeatable=True)
