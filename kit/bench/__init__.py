"""Benchmarks (never timed tests): `kit bench verify`, `kit bench rollout`, `kit bench grpo`, gold replays."""
