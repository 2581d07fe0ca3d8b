"""Benchmarks: method comparisons and the fidelity suite, resumable, with their reports."""
