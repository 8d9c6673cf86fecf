"""τ² domains (and your own) as forkable episode environments."""

from kit.envs.domain import (BUILTIN_DOMAINS, Domain, available_domains, domain_problem, load_domain,
                             register_domain)
from kit.envs.episode import EpisodeEnv, Observation, RecordChange, ReplayError

__all__ = [
    "BUILTIN_DOMAINS", "Domain", "EpisodeEnv", "Observation", "RecordChange", "ReplayError",
    "available_domains", "domain_problem", "load_domain", "register_domain",
]
