"""Benchmarks of raylog (run as modules, e.g. ``python -m benchmarks.storage_bench``)."""
