"""Tests of the store and the database layer: `api/store/`, `api/db/`, `migrations/`."""
