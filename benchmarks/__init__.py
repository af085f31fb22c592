"""Benchmark scripts (run from the repository root with ``python -m benchmarks.<name>``)."""
