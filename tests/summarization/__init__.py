"""Tests of the service's summarization: `api/summarization.py`, `api/worker.py`, `api/locks.py`,
the summary policy of `api/settings.py`, the summary routes and removal's erasure of summaries."""
