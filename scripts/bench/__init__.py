"""Benchmarks and the load test; `python -m scripts.bench.NAME`.

The fake LLM, the served app and scratch databases they run against are in `tests/support`.

- `run`: the performance benchmark (`make bench`): its command line and the order of the run;
  its measures in `append_rows`, `load_rows` (on the sessions `load_sessions` builds),
  `http_rows` and `token_rows`; `plan` what they share, `precis` Precis at the store layer and
  through HTTP, `results` the numbers and the table.
- `lib`: the benchmark's payloads, timers and statistics.
- `baselines`: the raw drivers and peer libraries the benchmark compares against.
- `rss`: peak RSS of history loads in a clean process, run by `run`.
- `summarizer`: the summarizer's benchmark (`make bench-summarizer`).
- `fidelity`: the summaries' fidelity benchmark (`make bench-fidelity`).
- `load`: the load test against a real server on loopback (`make load`).
"""
