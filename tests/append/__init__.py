"""Tests of the append: `api/append/` and what an append stores."""
