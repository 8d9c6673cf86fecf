"""telecom write calls (to come)."""

GENERATORS: dict = {}
