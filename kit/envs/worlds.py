"""Starting states for synthesis: a domain's database plus a few sampled records.

    data = sample_world("mock", random.Random(0))   # dict for Task.initial_state.initialization_data.agent_data

Why: tau2's mock database holds one user and one task, so every task the engine could make
there would use `user_1` and `task_1` (and 'mark task_1 completed' is one of the nine tasks
evaluation scores). Tasks made in varied worlds differ in ids, names and titles, and an agent
trained on them must read those values from the dialogue instead of memorising constants.

A world is a domain rule, so it lives here with the domains; a domain without a sampler is
used as it is (None). The engine records the world in each task's `initial_state`, where tau2
and the kit apply it the same way (`Domain.fork`). The names below are the engine's own; the
held-out evaluation set (kit/data) is made by another script with other lists.
"""

from __future__ import annotations

import random
from typing import Callable, Optional

_FIRST = ["Maya", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Sofia", "Jonas", "Amara", "Pavel", "Noor", "Elif",
          "Diego", "Hana", "Oskar", "Zara", "Felix", "Mina", "Arjun", "Clara"]
_LAST = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski", "Reyes", "Brandt"]
_TITLES = ["Pay electricity bill", "Book dentist appointment", "Prepare slides", "Water the plants",
           "Send invoice", "Call the bank", "Update resume", "Order printer ink", "Plan team lunch",
           "Review contract", "Fix bike brakes", "Renew gym membership", "Clean the garage", "Write blog post",
           "Buy birthday gift", "Submit expense report", "Back up laptop", "Schedule car service"]


def _mock_world(rng: random.Random) -> dict:
    """1-3 more users owning 5-8 more tasks. Record ids are the engine's own ('note_417'); create_task
    numbers a new task task_<count + 1>, so new ids start at task_7 and never name an existing one."""
    users: dict[str, dict] = {}
    while len(users) < rng.randint(1, 3):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        uid = rng.choice([f"user_{rng.randint(100, 999)}", f"{first.lower()}_{rng.randint(10, 99)}"])
        users.setdefault(uid, {"user_id": uid, "name": f"{first} {last}", "tasks": []})
    tasks: dict[str, dict] = {}
    while len(tasks) < rng.randint(5, 8):
        tid = f"{rng.choice(['note', 'rem', 'tsk'])}_{rng.randint(100, 999)}"
        tasks.setdefault(tid, {"task_id": tid, "title": rng.choice(_TITLES), "description": None,
                               "status": rng.choice(["pending", "pending", "completed"])})
    owners = list(users)
    for tid in tasks:
        users[rng.choice(owners)]["tasks"].append(tid)
    return {"users": users, "tasks": tasks}


WORLDS: dict[str, Callable[[random.Random], dict]] = {"mock": _mock_world}
# free-text argument values a domain can fall back on when the model's own fail the fidelity gate
FREE_TEXT: dict[str, dict[str, list[str]]] = {"mock": {"title": _TITLES}}


def sample_world(domain: str, rng: random.Random) -> Optional[dict]:
    """Database additions for one synthesized task, or None (the domain's base state)."""
    fn = WORLDS.get(domain)
    return fn(rng) if fn else None


def free_text_template(domain: str, param: str, rng: random.Random) -> Optional[str]:
    """A plausible value of a free-text argument (a task title), or None when the domain has none."""
    values = FREE_TEXT.get(domain, {}).get(param)
    return rng.choice(values) if values else None
