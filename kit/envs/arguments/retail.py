"""retail write calls (to come)."""

GENERATORS: dict = {}
