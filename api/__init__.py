"""Precis service: REST API, store and background summarization."""
