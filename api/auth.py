"""Authentication: bearer keys mapped to tenants, or loopback-only development mode."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Annotated

from fastapi import Depends, Request

from api.errors import Forbidden, Unauthorized

DEVELOPMENT_TENANT = "default"
"""The single tenant of development mode (no API_KEYS configured)."""

logger = logging.getLogger("precis.auth")


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def tenant_for(request: Request) -> str:
    """The tenant of the request's bearer key; compared in constant time, never logged."""
    keys: dict[str, str] = request.app.state.tenant_keys
    if not keys:
        host = request.client.host if request.client else None
        if not _is_loopback(host):
            logger.warning("refused %s: no API_KEYS configured, so only loopback is served", host)
            raise Forbidden("no API_KEYS are configured: only loopback clients are served")
        return DEVELOPMENT_TENANT
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise Unauthorized("missing bearer API key")
    tenant: str | None = None
    for key, key_tenant in keys.items():
        if hmac.compare_digest(key.encode(), presented.strip().encode()):
            tenant = key_tenant
    if tenant is None:
        raise Unauthorized("invalid API key")
    return tenant


Tenant = Annotated[str, Depends(tenant_for)]
