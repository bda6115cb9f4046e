"""Benchmarks: each prints its measurements and the ratio to a baseline run in the same process."""
