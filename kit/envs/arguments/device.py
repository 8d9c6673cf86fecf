"""Device faults: telecom tasks whose fix is the customer acting on their own phone.

tau2's telecom user has 30 tools that act on a simulated phone (toggle_airplane_mode, toggle_data,
reseat_sim_card, toggle_roaming, ...), and its own telecom tasks are built the same way as here
(tau2/domains/telecom/tasks/*_issues.py): the task's initial_state.initialization_actions break the
phone (`env_type: "user"`: turn airplane mode on, take the SIM out, data off, roaming off while
abroad; and, where the line is part of the fault, `env_type: "assistant"` changes to the carrier's
database), the gold actions hold the user's device actions (requestor "user") beside the agent's
reads and writes, and evaluation_criteria.env_assertions check that the symptom is gone
(assert_service_status, assert_mobile_data_status, assert_internet_speed).

Each `Fault` says how it breaks the phone, which user read shows the cause (the agent asks the customer
to look before telling them what to change: check_status_bar, check_network_status, ...), which device
action fixes it, what the customer experiences (in words: no tool names, no ids), and what tau2 asserts
once it is fixed. `device_candidates` pairs faults with the database's active lines (each line's phone
number is the phone the customer holds, its owner the customer) and returns whole `DeviceTask`s.

Faults kept (tau2's own mobile-data and service issues whose fix is a device action):
  airplane_mode_on        no service              check_status_bar           toggle_airplane_mode
  sim_card_out            no service              check_sim_status           reseat_sim_card
  mobile_data_off         no mobile data          check_network_status       toggle_data
  roaming_off_abroad      no data abroad          check_network_status       toggle_roaming (line roams)
  roaming_off_line_barred no data abroad          + the line's details       enable_roaming, toggle_roaming
  data_saver_on           slow data               check_data_restriction_status  toggle_data_saver_mode
  network_2g_only         slow data               check_network_mode_preference  set_network_mode_preference
Left out: a broken VPN (tau2's break_vpn changes the class-level default VPN details, so one fork's fault
leaks into every later fork of the process), APN and MMS faults (several steps and a reboot), a locked
SIM (tau2's fix is a transfer, which the engine's tasks never end in).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional

Call = tuple[str, dict]  # (function or tool name, arguments)


@dataclass(frozen=True)
class Fault:
    name: str
    breaks: tuple[Call, ...]  # user-side functions that put the phone in the faulty state (initialization)
    check: Call  # the user read whose result shows the cause
    fix: Call  # the user's device action that removes it
    symptoms: tuple[str, ...]  # what the customer experiences (second person; no tool names, no ids)
    goal: str  # when the customer considers it fixed (second person)
    assertions: tuple[Call, ...]  # user-side env assertions (tau2's) that hold once it is fixed
    abroad: bool = False
    line_roaming: Optional[bool] = None  # the line's roaming at the start (None: as the database has it)


NO_SERVICE = ("Your phone has been showing 'No Service' for the past few hours: you cannot call, text or use "
              "mobile data.",
              "Since this morning your phone has had no signal at all, so calls, texts and mobile data all fail.",
              "Your phone suddenly lost its connection to the network; nothing works unless you are on wifi.")
NO_DATA = ("Your mobile data has stopped working: web pages and apps do not load unless you are on wifi.",
           "You cannot get online on your phone any more. Mobile internet simply does not work.",
           "Apps on your phone say there is no internet connection whenever you are away from wifi.")
NO_DATA_ABROAD = ("You are travelling abroad and your mobile data does not work here, although it worked fine "
                  "at home.",
                  "Since you arrived abroad for your trip, your phone cannot get online over mobile data.",
                  "You are on a trip outside the country and your phone's mobile internet does not work.")
SLOW_DATA = ("Your mobile data works but is very slow: pages take ages to load. You want fast internet on your "
             "phone again.",
             "Your phone's internet has become painfully slow over mobile data, and you need it to be fast.",
             "Mobile data on your phone crawls: videos do not play and pages barely load.")
SERVICE_BACK = (("assert_service_status", {"expected_status": "connected"}),
                ("assert_mobile_data_status", {"expected_status": True}))
DATA_BACK = (("assert_mobile_data_status", {"expected_status": True}),)
FAST_AGAIN = (("assert_mobile_data_status", {"expected_status": True}),
              ("assert_internet_speed", {"expected_speed": 200, "expected_desc": "excellent"}))

FAULTS: dict[str, tuple[Fault, ...]] = {"telecom": (
    Fault("airplane_mode_on", (("turn_airplane_mode_on", {}),), ("check_status_bar", {}),
          ("toggle_airplane_mode", {}), NO_SERVICE, "your phone has service again", SERVICE_BACK),
    Fault("sim_card_out", (("unseat_sim_card", {}),), ("check_sim_status", {}),
          ("reseat_sim_card", {}), NO_SERVICE, "your phone has service again", SERVICE_BACK),
    Fault("mobile_data_off", (("turn_data_off", {}),), ("check_network_status", {}),
          ("toggle_data", {}), NO_DATA, "mobile data works on your phone again", DATA_BACK),
    Fault("roaming_off_abroad", (("set_user_location", {"abroad": True}), ("turn_roaming_off", {})),
          ("check_network_status", {}), ("toggle_roaming", {}), NO_DATA_ABROAD,
          "mobile data works on your phone again", DATA_BACK, abroad=True, line_roaming=True),
    Fault("roaming_off_line_barred", (("set_user_location", {"abroad": True}), ("turn_roaming_off", {})),
          ("check_network_status", {}), ("toggle_roaming", {}), NO_DATA_ABROAD,
          "mobile data works on your phone again", DATA_BACK, abroad=True, line_roaming=False),
    Fault("data_saver_on", (("turn_data_saver_mode_on", {}),), ("check_data_restriction_status", {}),
          ("toggle_data_saver_mode", {}), SLOW_DATA, "a speed test on your phone shows excellent speed",
          FAST_AGAIN),
    Fault("network_2g_only", (("set_network_mode_preference", {"mode": "2g_only"}),),
          ("check_network_mode_preference", {}), ("set_network_mode_preference", {"mode": "4g_5g_preferred"}),
          SLOW_DATA, "a speed test on your phone shows excellent speed", FAST_AGAIN),
)}


@dataclass(frozen=True)
class DeviceTask:
    """One fault on one customer's phone: everything a tau2 Task needs, as plain dicts."""

    fault: str
    name: str  # the customer's full name (they say it)
    phone: str  # the phone number of the line in their hand (they say it)
    abroad: bool
    init: tuple[dict, ...]  # tau2 EnvFunctionCall dicts, in order
    gold: tuple[tuple[str, str, dict], ...]  # (requestor, tool, arguments), in order
    assertions: tuple[dict, ...]  # tau2 EnvAssertion dicts
    symptoms: tuple[str, ...]
    goal: str
    summary: str  # one line the choosing model reads
    pattern: tuple[str, ...] = field(default=())  # the gold's writes (agent's and user's): the plan's tool pattern


DEVICE_INSTRUCTIONS = ("If the agent asks you to check or change something on your phone, do it on your phone and "
                       "tell the agent what the phone shows; never make up what it shows. You consider the issue "
                       "resolved only when {goal}.",
                       "Follow the agent's guidance on your phone one step at a time, and report exactly what the "
                       "phone shows after each step. The problem is solved only when {goal}.")
WHERE = {False: ("You are at home in the United States.", "You are currently at home."),
         True: ("You are currently travelling abroad.", "You are abroad on a trip right now.")}


def scenario(task: DeviceTask, rng: random.Random) -> tuple[str, str, str]:
    """(reason_for_call, known_info, task_instructions) of a device task, in words the customer can say:
    the symptom (never its cause or the setting that fixes it), who they are and where they are, and how
    they conduct the call."""
    known = f"You are {task.name}, and the phone with the problem has the number {task.phone}. " \
            f"{rng.choice(WHERE[task.abroad])}"
    return rng.choice(task.symptoms), known, rng.choice(DEVICE_INSTRUCTIONS).format(goal=task.goal)


def device_task(domain: Any, cand: DeviceTask, task_id: str, rng: random.Random, persona: Optional[str] = None,
                purpose: Optional[str] = None, notes: Optional[str] = None) -> Any:
    """The tau2 `Task` of a device fault: initialization_actions that break the phone, the gold (the user's
    check and fix, requestor "user"; the agent's reads and write where the line is part of it), tau2's env
    assertions, the scenario in the customer's words (`scenario`). Reward basis DB + ENV_ASSERTION, or
    ENV_ASSERTION alone (as tau2's own telecom tasks) where the agent writes to the line: tau2's evaluator
    plays the gold without syncing the phone with the line, so its gold phone never learns of the write and
    no DB comparison could match."""
    from tau2.data_model.tasks import (Action, Description, EnvAssertion, EnvFunctionCall, EvaluationCriteria,
                                       InitialState, StructuredUserInstructions, Task, UserScenario)

    reason, known, instructions = scenario(cand, rng)
    agent_writes = any(r == "assistant" and domain.is_write_tool(n) for r, n, _ in cand.gold)
    return Task(
        id=task_id,
        description=Description(purpose=purpose, notes=notes) if purpose or notes else None,
        user_scenario=UserScenario(persona=persona, instructions=StructuredUserInstructions(
            domain=domain.name, reason_for_call=reason, known_info=known, unknown_info=None,
            task_instructions=instructions)),
        initial_state=InitialState(initialization_actions=[EnvFunctionCall(**a) for a in cand.init]),
        evaluation_criteria=EvaluationCriteria(
            actions=[Action(action_id=f"a{i}", requestor=r, name=n, arguments=dict(a))
                     for i, (r, n, a) in enumerate(cand.gold)],
            env_assertions=[EnvAssertion(**a) for a in cand.assertions],
            reward_basis=["ENV_ASSERTION"] if agent_writes else ["DB", "ENV_ASSERTION"]))


def pattern(fault: Fault) -> tuple[str, ...]:
    """The writes of a fault's gold, in order: the plan's tool pattern (toggle_roaming; enable_roaming>toggle_roaming)."""
    return (("enable_roaming",) if fault.line_roaming is False else ()) + (fault.fix[0],)


def device_patterns(domain: str) -> list[tuple[str, ...]]:
    """The distinct tool patterns of a domain's faults (none for a domain without device faults)."""
    out: list[tuple[str, ...]] = []
    for f in FAULTS.get(domain, ()):
        if pattern(f) not in out:
            out.append(pattern(f))
    return out


def _status(value: Any) -> str:
    return getattr(value, "value", value)


def _lines(db: Any):
    """(customer, line, plan) for every active line with data left: a phone whose only fault is the drawn one."""
    plans = {p.plan_id: p for p in db.plans}
    lines = {x.line_id: x for x in db.lines}
    for customer in db.customers:
        for lid in customer.line_ids:
            line, plan = lines.get(lid), None
            plan = plans.get(line.plan_id) if line is not None else None
            if line is None or plan is None or _status(line.status) != "Active":
                continue
            if line.data_used_gb >= plan.data_limit_gb + (line.data_refueling_gb or 0.0):
                continue  # data used up: mobile data would not come back by a device action
            yield customer, line


def _env(env_type: str, func: str, args: dict) -> dict:
    return {"env_type": env_type, "func_name": func, "arguments": dict(args)}


def build(fault: Fault, customer: Any, line: Any) -> DeviceTask:
    """The task of `fault` on `line` (held by `customer`)."""
    owner = {"customer_id": customer.customer_id, "line_id": line.line_id}
    init = [_env("user", "set_user_info", {"name": customer.full_name, "phone_number": line.phone_number})]
    init += [_env("user", f, a) for f, a in fault.breaks]
    if fault.line_roaming is not None and bool(line.roaming_enabled) != fault.line_roaming:
        # the line's side of the fault, as tau2 sets it (allow_roaming / disallow_roaming), then the phone looks again
        init += [_env("assistant", "enable_roaming" if fault.line_roaming else "disable_roaming", owner),
                 _env("user", "simulate_network_search", {})]
    gold: list[tuple[str, str, dict]] = [("user", fault.check[0], dict(fault.check[1]))]
    if fault.line_roaming is not None:  # the policy: check that the line may roam (the agent reads it)
        gold += [("assistant", "get_customer_by_phone", {"phone_number": line.phone_number}),
                 ("assistant", "get_details_by_id", {"id": line.line_id})]
    if fault.line_roaming is False:
        gold.append(("assistant", "enable_roaming", owner))
    gold.append(("user", fault.fix[0], dict(fault.fix[1])))
    where = "abroad" if fault.abroad else "at home"
    return DeviceTask(
        fault=fault.name, name=customer.full_name, phone=line.phone_number, abroad=fault.abroad,
        init=tuple(init), gold=tuple(gold),
        assertions=tuple(_env("user", f, a) for f, a in fault.assertions),
        symptoms=fault.symptoms, goal=fault.goal, pattern=pattern(fault),
        summary=f"{fault.name.replace('_', ' ')} on the phone {line.phone_number} of {customer.full_name} "
                f"({customer.customer_id}, line {line.line_id}, {where})")


def task_phones(tasks: Any) -> set[str]:
    """The phones tau2 tasks put in the user's hand (their `set_user_info` initialization action)."""
    phones = set()
    for t in tasks:
        init = getattr(getattr(t, "initial_state", None), "initialization_actions", None) or []
        for a in init:
            if a.func_name == "set_user_info" and (a.arguments or {}).get("phone_number"):
                phones.add(a.arguments["phone_number"])
    return phones


def device_candidates(domain: str, db: Any, rng: random.Random, tools: tuple[str, ...] | list[str],
                      limit: int = 12, avoid_phones: frozenset[str] | set[str] = frozenset()
                      ) -> Optional[list[DeviceTask]]:
    """Device tasks of `domain` whose gold writes are `tools` (a plan's pattern), one per active line in a
    random order (at most `limit`); None where the domain has no device fault with that pattern. No task is
    put on a phone of `avoid_phones` (the evaluation tasks' phones: tau2's telecom tasks all fix one phone,
    and a fault fixed on that very phone in training is a piece of an evaluation task's solution). `db`
    (the agent database, the tau2 pydantic DB) is only read; deterministic given rng."""
    faults = [f for f in FAULTS.get(domain, ()) if pattern(f) == tuple(tools)]
    if not faults:
        return None
    pairs = [(c, line) for c, line in _lines(db) if line.phone_number not in avoid_phones]
    rng.shuffle(pairs)
    return [build(rng.choice(faults), c, line) for c, line in pairs[:limit]]


__all__ = ["FAULTS", "DeviceTask", "Fault", "build", "device_candidates", "device_patterns", "device_task", "pattern",
           "scenario", "task_phones"]
