"""Tests of the REST surface: `api/routes/`, `api/schemas/`, `api/openapi.py`, keys and errors."""
