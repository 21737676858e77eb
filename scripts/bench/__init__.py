"""Benchmarks and the load test; `python -m scripts.bench.NAME`.

The fake LLM, the served app and scratch databases they run against are in `tests/support`.

- `run`: the performance benchmark (`make bench`).
- `lib`: the benchmark's payloads, timers and statistics.
- `baselines`: the raw drivers and peer libraries the benchmark compares against.
- `rss`: peak RSS of history loads in a clean process, run by `run`.
- `summarizer`: the summarizer's benchmark (`make bench-summarizer`).
- `fidelity`: the summaries' fidelity benchmark (`make bench-fidelity`).
- `load`: the load test against a real server on loopback (`make load`).
"""
