"""Tests of the history: its loader and route, and context assembly (`api/context.py`)."""
