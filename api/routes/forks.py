"""Forking a session at one of its messages (`POST /v1/sessions/{id}/fork`)."""

from __future__ import annotations

from api.routes.checks import v1_router

router = v1_router()
