"""Precis summarization engine: pure, no database and no HTTP."""
