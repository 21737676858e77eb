"""Tests of the OpenAI-compatible API: `api/conversations.py`, `api/responses.py` and
`api/items.py`."""
