"""Operator tools, runnable as `python -m scripts.NAME` or `python scripts/NAME.py`.

Benchmarks, the load test, the fake LLM and scratch databases live in `scripts.bench`.
"""
