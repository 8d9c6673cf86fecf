"""Write kit/data/mock_heldout.json: a held-out evaluation set for the τ² mock domain.

    python scripts/make_mock_heldout.py                 # rewrites the committed file
    python scripts/make_mock_heldout.py --out /tmp/x.json

Why: the kit's data engine (kit/engine) synthesizes the mock tasks it trains on, and τ²'s own
9 mock tasks are what the quickstart evaluates on. A score that means something needs tasks
neither side has seen, so this set is made independently of the engine (plain Python, its
own hand-written word lists, a fixed seed; nothing from kit/ is imported) and is never used
for training. Same seed -> same file, byte for byte (tests/test_heldout.py checks it).

Each task is a τ² Task dict, rewarded on the final DB (reward_basis ["DB"]), of one of
five kinds (12 each):
  create           create_task(user, title)
  create_desc      create_task(user, title, description)
  complete         update_task_status(task, "completed") for a pending task
  reopen           update_task_status(task, "pending") for a completed task
  create_complete  create_task(user, title), then update_task_status(<new id>, "completed");
                   the new id (task_<#tasks + 1>) comes back from create_task.
Most tasks add users and tasks to the DB through initial_state.initialization_data.agent_data
(merged into db.json the way τ² merges it), so ids and titles differ per task; a third of the
create kinds use the bare base DB (user_1 / task_1). Every value the gold actions need is
stated in the user scenario.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20260611
PER_KIND = 12
KINDS = ("create", "create_desc", "complete", "reopen", "create_complete")
OUT = Path(__file__).resolve().parents[1] / "kit" / "data" / "mock_heldout.json"

FIRST = ["Anna", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jun",
         "Kofi", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sami", "Tomas",
         "Uma", "Viktor", "Wen", "Yara", "Zeno"]
LAST = ["Berg", "Costa", "Dahl", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jansen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Sato", "Tanaka",
        "Varga", "Weber"]
TITLES = ["Renew passport", "Book dentist appointment", "Pay electricity bill", "Water the plants",
          "Call the landlord", "Return library books", "Fix the bike tire", "Plan team offsite",
          "Order printer ink", "Submit expense report", "Buy birthday gift", "Clean the garage",
          "Update resume", "Schedule car service", "Cancel gym membership", "Back up laptop",
          "Draft quarterly summary", "Send thank-you notes", "Pick up dry cleaning",
          "File tax documents", "Replace smoke detector battery", "Prepare slides for Monday",
          "Review pull request", "Book train tickets", "Defrost the freezer", "Renew car insurance",
          "Sort old photos", "Email the accountant", "Repaint the fence", "Organize bookshelf",
          "Vaccinate the dog", "Print boarding passes", "Restock first-aid kit", "Write blog post",
          "Check smoke alarms", "Test backup restore", "Label moving boxes", "Donate old clothes",
          "Refill prescription", "Reply to recruiter", "Translate user guide", "Tune the piano",
          "Archive 2023 invoices", "Measure living room", "Register for marathon",
          "Bake bread for potluck", "Rotate API keys", "Descale coffee machine"]
DESCRIPTIONS = ["Bring the signed forms and two photos", "Before the end of the month",
                "Ask for the Tuesday morning slot", "Use the shared team folder",
                "Budget is 50 euros at most", "Coordinate with the facilities desk",
                "Keep the receipts for reimbursement", "Needs to happen before the trip",
                "Double-check the account number first", "Only the blue ones, not the grey ones",
                "Loop in the finance team", "Do it on the weekend"]
TASK_ID_PREFIXES = ["t", "todo", "item", "job", "card"]
PERSONAS = ["Brief and polite; writes short sentences.", "Friendly and a little chatty.",
            "Busy professional who gets straight to the point.", "Formal and precise.",
            "Relaxed and informal; uses casual language."]
STOP = "Once the agent confirms it is done, end the conversation with ###STOP###."


def _world(rng: random.Random, bare: bool) -> tuple[dict, dict]:
    """(users, tasks) added on top of db.json's user_1/task_1 (empty when `bare`)."""
    if bare:
        return {}, {}
    users: dict[str, dict] = {}
    n_users = rng.randint(1, 3)
    while len(users) < n_users:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        uid = rng.choice([f"user_{rng.randint(2, 99)}", f"u_{first.lower()}",
                          f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"])
        users.setdefault(uid, {"user_id": uid, "name": f"{first} {last}", "tasks": []})
    tasks: dict[str, dict] = {}
    sequential = rng.random() < 0.5  # task_2, task_3, ... or free-form ids like job_417
    titles = rng.sample(TITLES, rng.randint(2, 5))
    for title in titles:
        tid = f"task_{len(tasks) + 2}" if sequential else f"{rng.choice(TASK_ID_PREFIXES)}_{rng.randint(10, 999)}"
        if tid in tasks:
            continue
        desc = rng.choice(DESCRIPTIONS) if rng.random() < 0.4 else None
        tasks[tid] = {"task_id": tid, "title": title, "description": desc,
                      "status": rng.choice(["pending", "completed"])}
        users[rng.choice(sorted(users))]["tasks"].append(tid)
    return users, tasks


def _task(rng: random.Random, idx: int, kind: str) -> dict:
    bare = kind.startswith("create") and idx % 3 == 0
    users, tasks = _world(rng, bare)
    user = rng.choice(sorted(users)) if users else "user_1"
    taken = {t["title"] for t in tasks.values()} | {"Test task"}
    title = rng.choice([t for t in TITLES if t not in taken])
    you = f"Your user id is {user}."
    if kind == "complete" or kind == "reopen":
        old, new = ("pending", "completed") if kind == "complete" else ("completed", "pending")
        candidates = sorted(tid for tid in tasks if tid not in ("task_1", "task_2"))
        tid = rng.choice(candidates)
        tasks[tid]["status"] = old
        owner = next(u for u in sorted(users) if tid in users[u]["tasks"])
        title = tasks[tid]["title"]
        you = f"Your user id is {owner}. The task id is {tid} (titled '{title}'); it is currently {old}."
        reason = (f"You finished '{title}' and want it marked as completed." if kind == "complete" else
                  f"You marked '{title}' as completed by mistake and want it set back to pending.")
        actions = [("update_task_status", {"task_id": tid, "status": new})]
        instr = f"Ask the agent to set task {tid} to {new}. Give the task id when asked. {STOP}"
    else:
        args = {"user_id": user, "title": title}
        desc = rng.choice(DESCRIPTIONS) if kind == "create_desc" else None
        if desc:
            args["description"] = desc
            you += f" The task title is '{title}' and its description is exactly: '{desc}'."
        else:
            you += f" The task title is '{title}'. You do not want a description."
        reason = f"You want a new task titled '{title}' on your task list."
        actions = [("create_task", args)]
        instr = f"Ask the agent to create the task. Give your user id and the exact title when asked. {STOP}"
        if kind == "create_complete":
            new_id = f"task_{len(tasks) + 2}"  # create_task's id: task_<#tasks + 1>, task_1 included
            assert new_id not in tasks
            reason = f"You already did '{title}', but want it recorded: a new task, marked as completed."
            actions.append(("update_task_status", {"task_id": new_id, "status": "completed"}))
            instr = ("Ask the agent to create the task and then mark that new task as completed. "
                     f"Give your user id and the exact title when asked. {STOP}")
    task: dict = {
        "id": f"heldout-{idx:03d}",
        "description": {"purpose": f"Held-out mock task ({kind}).",
                        "notes": "Generated by scripts/make_mock_heldout.py; never used for training."},
        "user_scenario": {
            "persona": rng.choice(PERSONAS),
            "instructions": {"domain": "mock", "reason_for_call": reason, "known_info": you,
                             "unknown_info": None, "task_instructions": instr},
        },
        "initial_state": None,
        "evaluation_criteria": {
            "actions": [{"action_id": f"heldout-{idx:03d}-{k}", "requestor": "assistant", "name": name,
                         "arguments": args} for k, (name, args) in enumerate(actions)],
            "reward_basis": ["DB"],
        },
    }
    if users:
        # merged into db.json: user_1 and task_1 stay, these come next to them
        task["initial_state"] = {"initialization_data": {"agent_data": {"users": users, "tasks": tasks}}}
    return task


def make_tasks(seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    seen: set[str] = set()
    order = [kind for _ in range(PER_KIND) for kind in KINDS]
    while len(out) < len(order):
        task = _task(rng, len(out), order[len(out)])
        key = json.dumps([(a["name"], a["arguments"]) for a in task["evaluation_criteria"]["actions"]], sort_keys=True)
        if key not in seen:  # every task's gold actions differ from every other's
            seen.add(key)
            out.append(task)
    return out


def write(path: Path = OUT, seed: int = SEED) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(make_tasks(seed), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--seed", type=int, default=SEED)
    a = ap.parse_args()
    print(write(Path(a.out), a.seed))
