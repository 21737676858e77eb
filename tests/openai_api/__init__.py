"""Tests of the OpenAI-compatible API: `api/conversations.py`, `api/compat/responses.py` and
`api/items.py`."""
