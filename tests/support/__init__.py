"""What the tests run against, shared with the benchmarks and the load test (`scripts/bench`
imports it too).

- `fake_llm`: the loopback OpenAI-compatible fake LLM, with knobs for its window and failures.
- `live_server`: the service (or another ASGI app) served by uvicorn in a subprocess on loopback.
- `scratch_db`: create, migrate and drop scratch databases; the project's Alembic config.
- `pg_cluster`: a PostgreSQL cluster of one's own, to stop and start at will.
- `pgbouncer`: a PgBouncer of one's own in transaction mode.
- `pg_proxy`: a loopback proxy in front of PostgreSQL that cuts a connection around a statement.
"""
