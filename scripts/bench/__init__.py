"""Benchmarks, the load test, the fake LLM and scratch databases; `python -m scripts.bench.NAME`.

- `run`: the performance benchmark (`make bench`).
- `lib`: the benchmark's payloads, timers, statistics and served app.
- `baselines`: the raw drivers and peer libraries the benchmark compares against.
- `rss`: peak RSS of history loads in a clean process, run by `run`.
- `summarizer`: the summarizer engine's benchmark (`make bench-summarizer`).
- `fidelity`: the summaries' fidelity benchmark (`make bench-fidelity`).
- `load`: the load test against a real server on loopback (`make load`).
- `fake_llm`: the loopback OpenAI-compatible fake LLM of the tests, the load test and benchmarks.
- `scratch_db`: create, migrate and drop scratch databases; the project's Alembic config.
"""
