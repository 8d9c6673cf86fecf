"""Write kit/data/mock_heldout.json: a held-out evaluation set for the τ² mock domain.

    python scripts/make_mock_heldout.py                 # rewrites the committed file
    python scripts/make_mock_heldout.py --out /tmp/x.json

Why: the kit's data engine (kit/engine) synthesizes the mock tasks it trains on, and τ²'s own
9 mock tasks are what the quickstart evaluates on. A score that means something needs tasks
neither side has seen, so this set is made independently of the engine (plain Python, its
own hand-written word lists, fixed seeds; nothing from kit/ is imported) and is never used
for training. Same seed -> same file, byte for byte (tests/test_heldout.py checks it).

Each task is a τ² Task dict, rewarded on the final DB (reward_basis ["DB"]), of one of seven
shapes:
  create           create_task(user, title)
  create_desc      create_task(user, title, description)
  complete         update_task_status(task, "completed") for a pending task
  reopen           update_task_status(task, "pending") for a completed task
  create_complete  create_task(user, title), then update_task_status(<new id>, "completed");
                   the new id (task_<#tasks + 1>) comes back from create_task
  lookup_create    the user gives a name, not an id: get_users(), then create_task(<their id>, title)
  lookup_complete  the user gives a name and the title of their only task: get_users() (a user's
                   task ids are all mock's read tool shows; it has none for titles), then
                   update_task_status(<that task's id>, "completed")
and one of two phrasings:
  template   one fixed sentence per fact ("Your user id is u_ivo. The task title is '...'.")
  free_form  τ²'s own style (its retail/airline scenarios: "You are Yusuf Rossi in zip code
             19122."): reason, known and unknown info and the user's manner written from
             hand-written banks of sentence structures, synonyms, orderings and politeness levels
Composition: 12 template tasks per shape and 24 free-form ones per shape, 252 in all. The first 60
(heldout-000..059: the five id-based shapes in turn, template) are the set's first version,
unchanged, so numbers measured on them before stay comparable.

Most tasks add users and tasks to the DB through initial_state.initialization_data.agent_data
(merged into db.json the way τ² merges it), so ids, names and titles differ per task; some create
tasks use the bare base DB (user_1 / task_1). Every value the gold writes need is stated in the
user scenario, except the ids a lookup finds (never stated: the agent must read them from get_users).

Metadata: each task's `description.notes` (τ²'s Task keeps it; neither the agent nor the user
simulator is shown it) is JSON {"shape", "phrasing", "split", "generator"}. `split` is a fixed,
stratified division: in every (shape, phrasing) cell a quarter of the tasks (3 template, 6
free-form; 63 in all) is "val", for learning curves during training, and the rest (189) "test",
for the numbers a run reports. The kit loads them as splits `heldout` (all), `heldout_val` and
`heldout_test` (kit/data).

A second file, kit/data/mock_confirm.json (`--confirm`; split `heldout_confirm`), is a confirmation slice:
the same generator at three further seeds (CONFIRM_SEEDS), every task whose gold actions equal those of a task
of the main set (or of an earlier confirmation task) dropped, ids `confirm-000` ..., every task's `split`
"confirm". It exists for a test declared after the 252 were used to choose something (a policy, a seed, a
setting): an evaluation on it is independent of that choice. The engine's held-out guard (kit/engine/validate.py)
rejects its solutions as it does the main set's (engine runs made before the slice existed may hold a few: the
evaluation's leak check, kit.eval.leak, finds them).
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20260611
PER_KIND = 12
KINDS = ("create", "create_desc", "complete", "reopen", "create_complete")  # the first version's shapes
SHAPES = KINDS + ("lookup_create", "lookup_complete")
PER_CELL = {"template": 12, "free_form": 24}  # tasks per shape
VAL_PER_CELL = {"template": 3, "free_form": 6}  # of them, in the validation slice
GENERATOR = "scripts/make_mock_heldout.py; never used for training"
OUT = Path(__file__).resolve().parents[1] / "kit" / "data" / "mock_heldout.json"
CONFIRM_SEEDS = (SEED + 1, SEED + 2, SEED + 3)
CONFIRM_OUT = OUT.with_name("mock_confirm.json")

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

# ----- the free-form phrasing's word banks ------------------------------------------------------
# Scenario prose is said back by the kit's user simulator in the first person (you -> I), so the
# reason and known info avoid "you" as an object and apostrophes; titles are always quoted.
MORE_TITLES = ["Oil the door hinges", "Renew the parking permit", "Collect the passport photos",
               "Ship the returned headphones", "Mend the garden hose", "Frame the wedding photo",
               "Book a table for Friday", "Charge the camera batteries", "Recycle old electronics",
               "Send the signed lease", "Hem the new trousers", "Clear the gutters",
               "Price the spare room paint", "Confirm the plumber visit", "Upload conference receipts",
               "Practice the toast speech", "Swap the winter tyres", "Cancel the magazine subscription",
               "Water the balcony herbs", "Return the borrowed ladder"]
MORE_DESCRIPTIONS = ["Call before noon", "The blue folder on the top shelf", "Ask for a written quote",
                     "No later than the 14th", "Split the cost with the neighbours",
                     "Take the side entrance", "Use the company card", "Bring the old parts along"]
CREATE_ASKS = ["You want to add {t} to your to-do list.", "You would like a new task called {t}.",
               "You need {t} written down as a task so that it does not slip your mind.",
               "Your goal is to get a task named {t} onto your list.",
               "You are hoping to have {t} set up as a new task.",
               "You want the assistant to put {t} on your task list.",
               "You are calling to have a to-do item, {t}, recorded.",
               "You want a fresh task on your list: {t}."]
CREATE_WHY = ["You just remembered an errand that keeps getting postponed.",
              "A friend mentioned something this morning that you must not forget.",
              "You are planning the coming week.",
              "Your calendar is filling up and you want to keep track of everything.",
              "You recently started using this task service.",
              "Your manager wants every open item written down.",
              "A sticky note with this reminder went missing twice already.", ""]
DESC_ASKS = ["You want a new task {t} with the description {d}.",
             "You would like {t} added as a task, and its description should say {d}.",
             "You need a task called {t}; in the description field you want exactly {d}.",
             "Your goal is to create the task {t} and attach the note {d} as its description.",
             "You want {t} on your list, described as {d}."]
COMPLETE_ASKS = ["You finished {t} and want task {tid} marked as completed.",
                 "You are done with {t} (task {tid}) and want it checked off as completed.",
                 "Task {tid}, {t}, is finished, and you want its status changed to completed.",
                 "You would like {t}, which is task {tid}, closed out as completed.",
                 "You want task {tid} ({t}) to show as done.",
                 "You took care of {t} and want task {tid} ticked off your list."]
COMPLETE_ASKS_NO_ID = ["You finished {t} and want it marked as completed.",
                       "You are done with {t} and would like its status set to completed.",
                       "{t} is finished; you want it to show as done."]
COMPLETE_WHY = ["You wrapped it up yesterday evening.", "It took longer than expected, but it is finally over.",
                "Your colleague confirmed that the job is finished.", ""]
REOPEN_ASKS = ["You marked {t} as completed by mistake and want task {tid} set back to pending.",
               "Task {tid}, {t}, was closed too early; you want it pending again.",
               "It turns out {t} is not actually done, so you want task {tid} reopened as pending.",
               "You need task {tid} ({t}) to be pending once more.",
               "You want to undo the completion of {t} (task {tid}) and put it back to pending.",
               "{t} still needs work, and you want task {tid} reopened."]
REOPEN_ASKS_NO_ID = ["You closed {t} by accident and want it back to pending.",
                     "{t} is not finished after all; you want it reopened.",
                     "You would like {t} to show as pending again."]
REOPEN_WHY = ["Something came up and the job has to be redone.", "You clicked the wrong checkbox last night.",
              "Your landlord says it is not finished after all.", ""]
CREATE_COMPLETE_ASKS = ["You already did {t}, but you want it on record: a new task, marked as completed.",
                        "You want to log {t} as a new task and then mark it completed, since it is already done.",
                        "You finished {t} before writing it down; you want it added to your list and set to completed.",
                        "Your goal is a task named {t} that shows as completed right away.",
                        "You want {t} created as a task and closed straight after, because it is done."]
CREATE_COMPLETE_WHY = ["You like to keep a record of everything that gets done.",
                       "Your team counts finished work from this list.", "It was a quick job, done before lunch.", ""]
USER_ID_FACTS = ["Your user id is {u}.", "You are {u} in the system.", "The id on your account is {u}.",
                 "You are registered under the user id {u}.", "Your account is {u}."]
TASK_ID_FACTS = ["The task id is {tid}.", "The task is listed as {tid}.", "You have the id {tid} written down for it."]
STATUS_FACTS = {"pending": ["Right now it still shows as pending.", "It is currently pending.", ""],
                "completed": ["Right now it shows as completed.", "It is currently marked completed.", ""]}
NAME_FACTS = ["You are {name}.", "Your name is {name}.", "The account is under your name, {name}.",
              "You are {name}, a registered user."]
ONLY_TASK_FACTS = ["{t} is the only task on your list.", "You have just one task in the system: {t}.",
                   "Your list holds a single task, {t}."]
UNKNOWN_USER = ["You do not know your user id.", "You never learned the id of your account.",
                "You do not remember your user id."]
UNKNOWN_USER_TASK = ["You do not know your user id or the task id.",
                     "You remember neither your user id nor the id of the task.",
                     "You have no idea what your user id or the task id are."]
MANNERS = ["You are polite and patient.", "You are in a hurry and keep your messages short.",
           "You are friendly and a bit chatty, but you stay on topic.", "You are formal and precise.",
           "You are curt and skip greetings.", "You are relaxed and write casually.",
           "You are courteous and say please.", "You are a little impatient."]
REVEAL = ["Give details only when the agent asks for them.", "Share everything you know in your first message.",
          "Answer the questions of the agent one at a time.", "Start with what you want done, then give the details."]
NO_DESCRIPTION = ["If the agent offers to add a description, decline.", "You do not want a description on the task.",
                  "Leave the description empty."]
BY_NAME = ["If the agent asks for your user id, say you do not know it and give your name instead.",
           "You can only identify yourself by name.", "When asked who you are, give your full name."]
STOPS = ["When the agent confirms it is done, end the conversation with ###STOP###.",
         "Once everything is confirmed, say goodbye and send ###STOP###.",
         "After the agent confirms the change, finish with ###STOP###.",
         "End the chat with ###STOP### as soon as the request is handled.",
         "Say ###STOP### once the agent tells you it is taken care of."]
FREE_PERSONAS = [None, None, None, "A retired teacher who likes things tidy.", "A graduate student juggling deadlines.",
                 "A small-business owner with many errands.", "A parent of two with a busy schedule.",
                 "A software engineer used to issue trackers.", "A freelance designer who works odd hours."]


# ----- worlds -----------------------------------------------------------------------------------

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


def _named_world(rng: random.Random, only_task: bool) -> tuple[dict, dict, str]:
    """(users, tasks, the caller's user id) for a lookup: 2-4 users with distinct full names (the
    caller is known by name only); with `only_task`, the caller owns exactly one task, pending."""
    people = rng.sample([(f, la) for f in FIRST for la in LAST], rng.randint(2, 4))
    users: dict[str, dict] = {}
    for first, last in people:
        uid = f"user_{rng.randint(2, 99)}" if rng.random() < 0.5 else f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        while uid in users:
            uid = f"user_{rng.randint(100, 999)}"
        users[uid] = {"user_id": uid, "name": f"{first} {last}", "tasks": []}
    caller = next(iter(users))
    others = [u for u in users if u != caller]
    tasks: dict[str, dict] = {}
    sequential = rng.random() < 0.5
    titles = rng.sample(TITLES + MORE_TITLES, rng.randint(3, 6))
    for i, title in enumerate(titles):
        tid = f"task_{len(tasks) + 2}" if sequential else f"{rng.choice(TASK_ID_PREFIXES)}_{rng.randint(10, 999)}"
        if tid in tasks:
            continue
        owner = caller if (i == 0 and only_task) else rng.choice(others if only_task else sorted(users))
        tasks[tid] = {"task_id": tid, "title": title, "description": None,
                      "status": "pending" if owner == caller and only_task else rng.choice(["pending", "completed"])}
        users[owner]["tasks"].append(tid)
    return users, tasks, caller


# ----- template phrasing ------------------------------------------------------------------------

def _task(rng: random.Random, idx: int, kind: str) -> dict:
    """A template task of one of the first version's five shapes (unchanged: same rng draws)."""
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
    return _assemble(idx, rng.choice(PERSONAS), reason, you, None, instr, actions, users, tasks)


def _lookup_template(rng: random.Random, idx: int, shape: str) -> dict:
    users, tasks, caller = _named_world(rng, only_task=shape == "lookup_complete")
    name = users[caller]["name"]
    if shape == "lookup_complete":
        tid = users[caller]["tasks"][0]
        title = tasks[tid]["title"]
        reason = f"You finished '{title}' and want it marked as completed."
        known = (f"Your name is {name}; you do not know your user id or the task id. '{title}' is the only task "
                 "on your list; it is currently pending.")
        actions = [("get_users", {}), ("update_task_status", {"task_id": tid, "status": "completed"})]
        instr = f"Ask the agent to mark the task as completed. Give your name and the title when asked. {STOP}"
    else:
        taken = {t["title"] for t in tasks.values()}
        title = rng.choice([t for t in TITLES + MORE_TITLES if t not in taken])
        reason = f"You want a new task titled '{title}' on your task list."
        known = (f"Your name is {name}; you do not know your user id. The task title is '{title}'. "
                 "You do not want a description.")
        actions = [("get_users", {}), ("create_task", {"user_id": caller, "title": title})]
        instr = f"Ask the agent to create the task. Give your name and the exact title when asked. {STOP}"
    return _assemble(idx, rng.choice(PERSONAS), reason, known, None, instr, actions, users, tasks)


# ----- free-form phrasing -----------------------------------------------------------------------

def _q(rng: random.Random, text: str) -> str:
    return rng.choice(["'{}'", '"{}"']).format(text)


def _prose(rng: random.Random, ask: str, why_bank: list[str]) -> str:
    """The reason for the call: the request with (or without) some context, in either order."""
    why = rng.choice(why_bank)
    return " ".join(x for x in ((why, ask) if rng.random() < 0.5 else (ask, why)) if x)


def _facts(rng: random.Random, *facts: str) -> str:
    facts = [f for f in facts if f]
    rng.shuffle(facts)
    return " ".join(facts)


def _manner(rng: random.Random, *extra: list[str]) -> str:
    parts = [rng.choice(MANNERS), rng.choice(REVEAL)] + [rng.choice(bank) for bank in extra]
    rng.shuffle(parts)
    return " ".join(parts + [rng.choice(STOPS)])


def _free(rng: random.Random, idx: int, shape: str) -> dict:
    persona = rng.choice(FREE_PERSONAS)
    if shape.startswith("lookup"):
        users, tasks, caller = _named_world(rng, only_task=shape == "lookup_complete")
        name = rng.choice(NAME_FACTS).format(name=users[caller]["name"])
        if shape == "lookup_complete":
            tid = users[caller]["tasks"][0]
            t = _q(rng, tasks[tid]["title"])
            reason = _prose(rng, rng.choice(COMPLETE_ASKS_NO_ID).format(t=t), COMPLETE_WHY)
            known = _facts(rng, name, rng.choice(ONLY_TASK_FACTS).format(t=t), rng.choice(STATUS_FACTS["pending"]))
            actions = [("get_users", {}), ("update_task_status", {"task_id": tid, "status": "completed"})]
            return _assemble(idx, persona, reason[0].upper() + reason[1:], known, rng.choice(UNKNOWN_USER_TASK),
                             _manner(rng, BY_NAME), actions, users, tasks)
        taken = {x["title"] for x in tasks.values()}
        title = rng.choice([x for x in MORE_TITLES + TITLES if x not in taken])
        reason = _prose(rng, rng.choice(CREATE_ASKS).format(t=_q(rng, title)), CREATE_WHY)
        actions = [("get_users", {}), ("create_task", {"user_id": caller, "title": title})]
        return _assemble(idx, persona, reason, name, rng.choice(UNKNOWN_USER), _manner(rng, BY_NAME, NO_DESCRIPTION),
                         actions, users, tasks)

    bare = shape.startswith("create") and rng.random() < 0.25
    users, tasks = _world(rng, bare)
    if shape in ("complete", "reopen"):
        old, new = ("pending", "completed") if shape == "complete" else ("completed", "pending")
        tid = rng.choice(sorted(x for x in tasks if x not in ("task_1", "task_2")) or sorted(tasks))
        tasks[tid]["status"] = old
        owner = next(u for u in sorted(users) if tid in users[u]["tasks"])
        t = _q(rng, tasks[tid]["title"])
        with_id, no_id, why = ((COMPLETE_ASKS, COMPLETE_ASKS_NO_ID, COMPLETE_WHY) if shape == "complete"
                               else (REOPEN_ASKS, REOPEN_ASKS_NO_ID, REOPEN_WHY))
        said_id = rng.random() < 0.6  # the task id in the request itself, or among the facts
        ask = rng.choice(with_id if said_id else no_id).format(t=t, tid=tid)
        reason = _prose(rng, ask[0].upper() + ask[1:], why)
        owner_fact = rng.choice(USER_ID_FACTS).format(u=owner) if rng.random() < 0.5 else ""
        known = _facts(rng, "" if said_id else rng.choice(TASK_ID_FACTS).format(tid=tid), owner_fact,
                       rng.choice(STATUS_FACTS[old]))
        actions = [("update_task_status", {"task_id": tid, "status": new})]
        return _assemble(idx, persona, reason, known or None, None, _manner(rng), actions, users, tasks)

    user = rng.choice(sorted(users)) if users else "user_1"
    taken = {x["title"] for x in tasks.values()} | {"Test task"}
    title = rng.choice([x for x in MORE_TITLES + TITLES if x not in taken])
    t = _q(rng, title)
    args = {"user_id": user, "title": title}
    extra = [NO_DESCRIPTION]
    if shape == "create_desc":
        args["description"] = rng.choice(MORE_DESCRIPTIONS + DESCRIPTIONS)
        reason = _prose(rng, rng.choice(DESC_ASKS).format(t=t, d=_q(rng, args["description"])), CREATE_WHY)
        extra = []
    elif shape == "create_complete":
        reason = _prose(rng, rng.choice(CREATE_COMPLETE_ASKS).format(t=t), CREATE_COMPLETE_WHY)
    else:
        reason = _prose(rng, rng.choice(CREATE_ASKS).format(t=t), CREATE_WHY)
    actions = [("create_task", args)]
    if shape == "create_complete":
        new_id = f"task_{len(tasks) + 2}"  # create_task's id: task_<#tasks + 1>, task_1 included
        assert new_id not in tasks
        actions.append(("update_task_status", {"task_id": new_id, "status": "completed"}))
    known = rng.choice(USER_ID_FACTS).format(u=user)
    return _assemble(idx, persona, reason, known, None, _manner(rng, *extra), actions, users, tasks)


# ----- the set ----------------------------------------------------------------------------------

def _assemble(idx: int, persona, reason: str, known, unknown, instr: str, actions: list, users: dict,
              tasks: dict) -> dict:
    task: dict = {
        "id": f"heldout-{idx:03d}",
        "description": None,  # labelled in make_tasks
        "user_scenario": {
            "persona": persona,
            "instructions": {"domain": "mock", "reason_for_call": reason, "known_info": known,
                             "unknown_info": unknown, "task_instructions": instr},
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


def _key(task: dict) -> str:
    return json.dumps([(a["name"], a["arguments"]) for a in task["evaluation_criteria"]["actions"]], sort_keys=True)


def make_tasks(seed: int = SEED) -> list[dict]:
    # the first version's 60 tasks, drawn as they always were
    rng = random.Random(seed)
    out: list[tuple[dict, str, str]] = []
    seen: set[str] = set()
    order = [kind for _ in range(PER_KIND) for kind in KINDS]
    while len(out) < len(order):
        task = _task(rng, len(out), order[len(out)])
        if _key(task) not in seen:  # every task's gold actions differ from every other's
            seen.add(_key(task))
            out.append((task, order[len(out)], "template"))
    # then the lookup shapes (template) and every shape free-form, the cells in turn
    rng = random.Random(f"{seed}:v2")
    left = {(s, "template"): PER_CELL["template"] for s in SHAPES if s not in KINDS}
    left.update({(s, "free_form"): PER_CELL["free_form"] for s in SHAPES})
    while any(left.values()):
        for (shape, phrasing), n in left.items():
            if not n:
                continue
            make = _lookup_template if phrasing == "template" else _free
            task = make(rng, len(out), shape)
            if _key(task) not in seen:
                seen.add(_key(task))
                out.append((task, shape, phrasing))
                left[(shape, phrasing)] -= 1
    # the fixed split: a quarter of every (shape, phrasing) cell is the validation slice
    rng = random.Random(f"{seed}:split")
    val: set[str] = set()
    for phrasing in PER_CELL:
        for shape in SHAPES:
            ids = [t["id"] for t, s, p in out if (s, p) == (shape, phrasing)]
            val |= set(rng.sample(ids, VAL_PER_CELL[phrasing]))
    for task, shape, phrasing in out:
        task["description"] = {
            "purpose": f"Held-out mock task ({shape}, {phrasing}).",
            "notes": json.dumps({"shape": shape, "phrasing": phrasing,
                                 "split": "val" if task["id"] in val else "test", "generator": GENERATOR}),
        }
    return [t for t, _, _ in out]


def make_confirm_tasks(seeds=CONFIRM_SEEDS, seed: int = SEED) -> list[dict]:
    """The confirmation slice: make_tasks at each of `seeds`, minus every task whose gold actions a task of the
    main set (make_tasks(seed)) or an earlier kept one already has; ids confirm-000 ..., split "confirm"."""
    seen = {_key(t) for t in make_tasks(seed)}
    out: list[dict] = []
    for s in seeds:
        for task in make_tasks(s):
            if (key := _key(task)) in seen:
                continue
            seen.add(key)
            meta = json.loads(task["description"]["notes"])
            meta.update(split="confirm", seed=s)
            old, task["id"] = task["id"], f"confirm-{len(out):03d}"
            for action in task["evaluation_criteria"]["actions"]:
                action["action_id"] = action["action_id"].replace(f"{old}-", f"{task['id']}-", 1)
            task["description"]["notes"] = json.dumps(meta)
            out.append(task)
    return out


def write(path: Path = OUT, seed: int = SEED, confirm: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tasks = make_confirm_tasks(seed=seed) if confirm else make_tasks(seed)
    path.write_text(json.dumps(tasks, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help=f"default: {OUT} ({CONFIRM_OUT} with --confirm)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--confirm", action="store_true", help="write the confirmation slice instead")
    a = ap.parse_args()
    print(write(Path(a.out or (CONFIRM_OUT if a.confirm else OUT)), a.seed, a.confirm))
