"""Benchmarks of mil-passes: `make bench` runs `python -m benchmarks.run`."""
