"""Benchmarks (never timed tests): `kit bench verify`, `kit bench rollout`, gold replays."""
