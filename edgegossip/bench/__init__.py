"""Benchmarks: each measures edgegossip beside a reference measured in the same run."""
