"""Tuning and diagnosis: parallelism sweeps, the knee, a recommendation, a bottleneck verdict."""
