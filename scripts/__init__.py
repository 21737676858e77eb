"""Operator tools, runnable as `python -m scripts.NAME` or `python scripts/NAME.py`."""
