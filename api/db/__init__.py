"""Database models and engine construction."""
