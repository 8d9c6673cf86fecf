"""Checkers: a task's executable reward, and the sandbox that runs model-written checker code."""
