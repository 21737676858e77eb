"""Tests of the operator tools and of the benchmarks' own code: `scripts/`, `scripts/bench/`."""
