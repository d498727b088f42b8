"""Benchmarks: `python -m benchmarks --help`."""
