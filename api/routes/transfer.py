"""A session moved as JSON Lines: export and import."""

from __future__ import annotations

from api.routes.checks import v1_router

router = v1_router()
