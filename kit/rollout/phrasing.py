"""The phrasing bank: many ways for a customer to ask for the same gold writes, each carrying every value.

    text = scenario_text(request, seed, labels={"tsk_4": "Pay rent"}, ask_for_id=False)
    text.reason_for_call, text.known_info, text.task_instructions    # the user's scenario (tau2 fields)
    text.phrasing                                                    # "template" | "free_form"
    dress(first_person(reason), seed)     # the opening: a greeting, the scenario said by the customer, a sign-off
    ask_line(("user_id",), seed), answer_line(first_person(known), seed)   # a fact given only when asked

Why: an agent trained on the engine's first gold dialogues learned a script, not to read (on 30 freely
worded mock tasks it answered every request with the same two calls): their openings came from five
sentences with one shape. The bank varies what a request looks like while keeping what it says.

What it varies (every choice is drawn from the task's id and `seed`, so a run is reproducible):
  family      template (the request stated plainly) or free_form (tau2's style: a situation, then the goal)
  structure   where each side fact goes: inside the request ("for user_3"), a sentence before or after
              it ("You are user_3."), or the known info only; for facts_on_request the customer's own id
              is withheld from the first message and given when the agent asks (`ask_for`)
  wording     per write (create a task with or without description, mark completed, reopen, two writes
              joined), per value (the title quoted, double-quoted or bare, "called X", "named X"; the
              description as "details: ..."; a task by id, by "task <id>", or with its title beside it),
              frames ("You want to ...", "Your goal is to ...", "You need the agent to ..."), task
              instructions, and around the opening a greeting, a lead-in and a sign-off
  lookups     a customer who names themself ("Your name is Maya Okafor") instead of giving an id: the
              agent must look the id up (`Request.identity`); for facts_on_request they say it when asked
A tool the bank has no entry for is asked for in the generic words of kit/rollout/request.py.

Rules every phrasing keeps (tests/test_phrasing.py checks each one): it names every value the gold writes
need that the customer states (exactly, up to case and quotes: what kit/grounding.py matches), scenario
fields are addressed to the customer and pass the fidelity gate, and said in the first person they
contain no "you" (so an opening never reads as the agent talking).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from kit.tags import PHRASINGS, Phrasing

if TYPE_CHECKING:
    from kit.rollout.request import Request, Step


# ----- values --------------------------------------------------------------------------------------

def quote(value: Any, style: int) -> str:
    """A value as the customer writes it: style 0 'single', 1 "double", 2 bare (strings that read
    safely bare: no quotes and no second-person words, which saying it in the first person would change)."""
    if not isinstance(value, str):
        return json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    v = value.strip()
    bare_ok = v and not any(c in v for c in "'\"") and not set(v.lower().split()) & {"you", "your", "yours", "you're"}
    if style == 2 and bare_ok:
        return v
    if style == 1 or "'" in v:
        return f'"{v}"'
    return f"'{v}'"


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def _is_owner(key: str) -> bool:
    """The customer's own id (user_id, customer_id): given as a fact about the customer, or withheld."""
    return key.endswith(("user_id", "customer_id", "member_id"))


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


class _Pick:
    """Seeded choices, one stream per task and purpose."""

    def __init__(self, *key: Any):
        self.rng = random.Random(json.dumps(key, default=str))

    def __call__(self, options):
        return self.rng.choice(list(options))

    def coin(self, p: float = 0.5) -> bool:
        return self.rng.random() < p


# ----- the bank: words ---------------------------------------------------------------------------

TITLE_MODS = ("called {q}", "titled {q}", "named {q}", "with the title {q}", "{q}")
CREATE_VPS = (  # {tm}: a title modifier above; {tq}: the bare title
    "create a task {tm}", "add a new task {tm}", "set up a task {tm}", "open a new task {tm}",
    "make a to-do item {tm}", "put {tq} on your to-do list", "add {tq} to your tasks", "get {tq} added as a task",
)
DONE_VPS = ("mark {t} as {s}", "set {t} to {s}", "change the status of {t} to {s}", "have {t} marked as {s}",
            "update {t} so that it is {s}", "close out {t} as {s}", "record {t} as {s}")
REOPEN_VPS = ("set {t} back to {s}", "reopen {t} so that it is {s} again", "change the status of {t} to {s}",
              "mark {t} as {s} again", "move {t} back to {s}", "put {t} back to {s}")
STATUS_VPS = ("set the status of {t} to {s}", "change {t} to {s}", "mark {t} as {s}")
RECORD_REFS = ("{v}", "task {v}", "the task {v}", "the task with id {v}", "your task {v}")
LABELLED_REFS = ("{l} ({v})", "task {v} ({l})", "the task {l} (id {v})", "{l}, task {v},")
NEW_REFS = ("it", "the new task", "that new task", "the task just created")
JOINS = ("{a}, and then {b}", "{a}; after that, {b}", "{a}, then {b}", "{a} and also {b}")

OWNER_INLINE = (" for {v}", " for user id {v}", " under your account {v}", " on the account {v}",
                " for your user id {v}")
OWNER_FACTS = ("Your user id is {v}.", "Your account id is {v}.", "You are {v}.", "You are registered as {v}.",
               "Your id in the system is {v}.", "You know that your user id is {v}.")
DESC_INLINE = (" with the description {q}", ", details: {b}", " described as {q}", " (description: {q})",
               ", and the description should say {q}")
DESC_FACTS = ("You want the description to be {q}.", "Details you can give: {b}.",
              "You want the description {q} on it.", "You know that the description is {q}.",
              "Your description for it is {q}.")
NAME_INLINE = (" for {v}", " under the name {v}", " on the account of {v}")
NAME_FACTS = ("You are {v}.", "Your name is {v}.", "The account is in your name, {v}.",
              "You do not know your user id; your name is {v}.", "You go by {v} and have no id at hand.")
EMAIL_FACTS = ("Your email is {v}.", "The account uses your email, {v}.", "You only know your email, {v}.")

# (said back in the first person, so no frame talks about "the agent": "I need the agent to ..." reads wrong)
TEMPLATE_FRAMES = ("You want to {vp}.", "You need to {vp}.", "You are contacting support to {vp}.",
                   "You would like to {vp}.", "You are calling because you need to {vp}.",
                   "You would like the support team to {vp}.", "You are writing in to {vp}.")
GOAL_FRAMES = ("Your goal is to {vp}.", "You want to {vp}.", "You are calling to {vp}.", "You would like to {vp}.",
               "You hope to {vp} today.", "So you want to {vp}.", "Now you need to {vp}.")
CREATE_CONTEXTS = ("Something new came up that you need to keep track of.", "You are planning the week ahead.",
                   "You keep a to-do list with this service and want to add to it.",
                   "You do not want to forget about {tq}.", "You were just reminded about {tq}.",
                   "You are getting organised before a busy few days.")
DONE_CONTEXTS = ("You have just finished {l}.", "{L} is done now.", "You wrapped up {l} earlier today.",
                 "You finally got {l} done.", "You ticked off {l} this morning.")
REOPEN_CONTEXTS = ("You marked {l} as completed by mistake.", "{L} is not actually finished yet.",
                   "You need to pick {l} up again.", "It turns out {l} still needs work.")

INSTRUCTIONS = (
    "In your first message, say what you want and give the values you know. When the agent has done it, "
    "thank the agent and end the conversation.",
    "Ask for it in your first message, with every detail above. Once the agent confirms it is done, thank "
    "the agent and end the conversation.",
    "State the request and the details you know right away. When the agent says it is done, say thanks and "
    "end the conversation.",
    "Explain what you need in one message, including the details. End the conversation once the agent has "
    "done it.",
)
ASK_INSTRUCTIONS = (
    "Say what you want in your first message, but do not give your {what} until the agent asks for it. When the "
    "agent has done it, thank the agent and end the conversation.",
    "Start with the request only; give your {what} when the agent asks. Once it is done, thank the agent and end "
    "the conversation.",
)
LOOKUP_INSTRUCTIONS = (
    "Say what you want and give your name in your first message; you do not know your user id. When the agent "
    "has done it, thank the agent and end the conversation.",
    "Ask for it in your first message and say who you are by name (you have no id). Once the agent confirms it "
    "is done, thank the agent and end the conversation.",
)

# around the opening (the customer's words, not the scenario's: no facts, no "you")
GREETINGS = ("Hi! ", "Hello. ", "Hi there. ", "Hello! ", "Hi. ", "Hey there! ", "Good morning. ", "Good afternoon! ",
             "Hello, ", "Hi, ", "")
LEAD_INS = ("", "", "", "Quick one. ", "Sorry to bother. ", "I hope this is the right place. ",
            "I have a small request. ")
SIGN_OFFS = ("", "", " Thanks!", " Thank you.", " Thanks in advance.", " Much appreciated.", " Cheers.",
             " Thanks a lot.")
ASK_LINES = ("Could I have your {what}, please?", "Sure. What is your {what}?", "I can do that. Which {what} should I use?",
             "Happy to. May I have your {what}?", "Of course. What is the {what} on your account?")
ANSWER_LEAD = ("Sure, ", "Of course. ", "Yes: ", "", "Right, ", "Sure. ")
# whose first word may be lowercased after a comma greeting ("Hello, my goal is ...")
_LOWER_OK = {"my", "the", "a", "an", "something", "it", "task", "first", "so", "details:"}


# ----- rendering -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScenarioText:
    """What the bank writes for one task: the scenario's three fields, its family, and the facts the
    customer gives only when asked (argument names)."""

    reason_for_call: str
    known_info: Optional[str]
    task_instructions: str
    phrasing: Phrasing
    ask_for: tuple[str, ...] = ()


def _ref(pick: _Pick, step: "Step", key: str, labels: dict) -> str:
    """How the customer names the record an argument points at (a task by id, with its title, or 'it')."""
    if key in step.from_results:
        return pick(NEW_REFS)
    v = step.stated[key]
    label = labels.get(str(v))
    if label and pick.coin(0.4):
        return pick(LABELLED_REFS).format(v=v, l=quote(label, pick((0, 1))))
    return pick(RECORD_REFS).format(v=v)


def _context_label(pick: _Pick, step: "Step", key: str, labels: dict) -> Optional[str]:
    if key in step.from_results:
        return None
    v = step.stated[key]
    return quote(labels[str(v)], pick((0, 1))) if labels.get(str(v)) else f"task {v}"


def _core(pick: _Pick, step: "Step", labels: dict, generic: bool) -> tuple[str, Optional[str], set[str]]:
    """(verb phrase, a situation sentence for the free_form family or None, argument names it states)."""
    args = dict(step.stated)
    if step.tool == "create_task" and "title" in args and not generic:
        q = quote(args["title"], pick((0, 0, 1, 2)))
        vp = pick(CREATE_VPS).format(tm=pick(TITLE_MODS).format(q=q), tq=q)
        return vp, pick(CREATE_CONTEXTS).format(tq=q), {"title"}
    if step.tool == "update_task_status" and "status" in args and not generic:
        tkey = next((k for k in ("task_id",) if k in args or k in step.from_results), None)
        if tkey is not None:
            s = args["status"]
            vps = DONE_VPS if s == "completed" else REOPEN_VPS if s == "pending" else STATUS_VPS
            vp = pick(vps).format(t=_ref(pick, step, tkey, labels), s=s)
            label = _context_label(pick, step, tkey, labels)
            ctxs = DONE_CONTEXTS if s == "completed" else REOPEN_CONTEXTS if s == "pending" else ()
            ctx = pick(ctxs).format(l=label, L=_cap(label)) if (ctxs and label) else None
            return vp, ctx, {"status", tkey}
    plain = [k for k in args if not _is_owner(k)]
    # the τ² domains' own wordings (domain_phrases.py), then the customer's words for looked-up values; the
    # generic wording is no option for a tool that has a wording of its own (it read as schema text: "refuel
    # the data with gb amount 1.0", telecom engine run of 2026-12-03) or for a list or record value (it would
    # read as JSON: "flights [{...}]"); it stays for a tool no domain phrase covers
    from kit.rollout.domain_phrases import PHRASES, render

    if not generic or step.tool in PHRASES or any(isinstance(args[k], (list, dict)) for k in plain):
        vp = render(step.tool, {k: args[k] for k in plain}, pick)
        if vp is not None:
            return (vp + "".join(f", {w}" for w in step.described.values() if w)
                    + (f", {step.reason}" if step.reason else "")), None, set(plain)
    return step.phrase(only=plain), None, set(plain)


def _side_inline(pick: _Pick, key: str, v: Any) -> str:
    if _is_owner(key):
        return pick(OWNER_INLINE).format(v=v)
    if key == "description":
        return pick(DESC_INLINE).format(q=quote(v, pick((0, 1))), b=quote(v, 2))
    return f" with {_words(key)} {quote(v, 0)}"


def _side_fact(pick: _Pick, key: str, v: Any) -> str:
    if _is_owner(key):
        return pick(OWNER_FACTS).format(v=v)
    if key == "description":
        return pick(DESC_FACTS).format(q=quote(v, pick((0, 1))), b=quote(v, 2))
    return f"You know that the {_words(key)} is {quote(v, 0)}."


def _identity(pick: _Pick, identity: dict, inline_ok: bool) -> tuple[str, str]:
    """(inline words or "", fact sentence) for the customer who says who they are instead of giving an id."""
    if len(identity) == 1:
        (key, v), = identity.items()
        if "@" in str(v) or "email" in key:
            return "", pick(EMAIL_FACTS).format(v=v)
        if key.endswith("name"):
            return (pick(NAME_INLINE).format(v=v) if inline_ok else ""), pick(NAME_FACTS).format(v=v)
    parts = [f"your {_words(k)} is {v}" for k, v in identity.items()]
    return "", _cap(", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + \
        pick((".", "; you do not know your id.", ", and that is how the account can be found."))


def scenario_text(request: "Request", seed: Any = None, labels: Optional[dict] = None, ask_for_id: bool = False,
                  family: Optional[Phrasing] = None) -> ScenarioText:
    """The scenario of `request` in one of the bank's phrasings (drawn from the task id and `seed`).

    labels: value -> a human label of the record it names (a task id -> its title), said beside it.
    ask_for_id: the customer withholds their own id (user_id) until the agent asks (facts_on_request); one
        with no id of their own (request.identity: retail's email, a name and zip) withholds who they are.
    family: force "template" or "free_form" (default: drawn)."""
    labels = labels or {}
    pick = _Pick(request.task_id, "scenario", seed)
    family = family or pick(PHRASINGS)
    steps = request.steps
    if not steps:
        text = request.fallback_text or "You need some help."
        return ScenarioText(text, None, task_instructions(request, seed), family)
    generic = family == "template" and pick.coin(0.15)  # the old generic wording stays one option
    before: list[str] = []   # fact sentences before the request
    after: list[str] = []    # ... after it
    known: list[str] = []    # ... in the known info only
    ask_for: list[str] = []
    vps, contexts = [], []
    withholding = ask_for_id and any(_is_owner(k) for s in steps for k in s.stated)
    owners_said: set[tuple[str, str]] = set()  # the customer's own id is said once, not once per write
    for i, step in enumerate(steps):
        vp, ctx, done = _core(pick, step, labels, generic)
        if ctx and i == 0:
            contexts.append(ctx)
        for key, v in step.stated.items():
            if key in done or (_is_owner(key) and (key, str(v)) in owners_said):
                continue
            if _is_owner(key):
                owners_said.add((key, str(v)))
            withhold = ask_for_id and _is_owner(key)
            # a fact about the record ("the description ...") only once the request named it; when the
            # customer withholds their id, the known info holds that alone (it is their answer when asked)
            places = ("inline", "inline", "before", "after", "known") if _is_owner(key) else ("inline", "after", "known")
            where = "known" if withhold else pick(places[:-1] if withholding else places)
            if withhold:
                ask_for.append(key)
            if where == "inline":
                vp += _side_inline(pick, key, v)
            else:
                {"before": before, "after": after, "known": known}[where].append(_side_fact(pick, key, v))
        vps.append(vp)
    if request.identity:  # who the customer is (the agent looks the id up by it)
        inline, fact = _identity(pick, request.identity, inline_ok=True)
        if ask_for_id and not withholding:  # no id of their own: they say who they are when the agent asks
            known.append(fact)
            ask_for.extend(request.identity)
        elif inline and pick.coin(0.3):
            vps[0] += inline
        else:
            (before if pick.coin() else after).append(fact)
    vp = vps[0]
    for nxt in vps[1:]:
        vp = pick(JOINS).format(a=vp, b=nxt)
    if family == "free_form":
        request_line = pick(GOAL_FRAMES).format(vp=vp)
        reason = " ".join(contexts[:1] + before + [request_line] + after)
    else:
        reason = " ".join(before + [pick(TEMPLATE_FRAMES).format(vp=vp)] + after)
    instructions = task_instructions(request, seed, tuple(ask_for))
    return ScenarioText(reason, " ".join(known) or None, instructions, family, tuple(ask_for))


def task_instructions(request: "Request", seed: Any = None, ask_for: tuple[str, ...] = ()) -> str:
    """How the customer conducts the call (code, not restated in the opening): all at once, withholding
    `ask_for` until asked, or by name when they have no id (a seeded stream of its own, so the choice does
    not depend on the rest of the scenario)."""
    pick = _Pick(request.task_id, "instructions", seed)
    if ask_for:
        return pick(ASK_INSTRUCTIONS).format(what=" and ".join(_words(k) for k in ask_for))
    return pick(LOOKUP_INSTRUCTIONS if request.identity else INSTRUCTIONS)


def _join(lead: str, text: str) -> str:
    """lead + text, lowering the text's first word after a comma where that reads right."""
    if lead.endswith(", "):
        first = text.split(" ", 1)[0].lower()
        if first in _LOWER_OK:
            return lead + text[0].lower() + text[1:]
        if not text.startswith("I "):
            return lead[:-2] + ". " + text
    return lead + text


def dress(text: str, seed: Any = None, key: Any = None) -> str:
    """The customer's opening: a greeting, maybe a lead-in, the text (already in the first person), maybe a sign-off."""
    pick = _Pick(key, "dress", seed)
    lead = pick(LEAD_INS)
    greeting = pick(GREETINGS)
    if lead and greeting.endswith(", "):
        greeting = greeting[:-2] + ". "
    body = _join(lead, text) if lead else text
    return (_join(greeting, body) if greeting else body) + pick(SIGN_OFFS)


def ask_line(names: tuple[str, ...] | list[str], seed: Any = None, key: Any = None) -> str:
    """The agent asking for facts the customer withheld (their user id)."""
    return _Pick(key, "ask", seed)(ASK_LINES).format(what=" and ".join(_words(n) for n in names))


def answer_line(text: str, seed: Any = None, key: Any = None) -> str:
    """The customer's answer: the withheld facts (already in the first person) behind a short lead."""
    return _join(_Pick(key, "answer", seed)(ANSWER_LEAD), text) if text else text


def facts_text(request: "Request", seed: Any = None) -> Optional[str]:
    """Every value the customer states, and the name they go by, as known-info facts (the fallback beside
    a model-written reason for call that passed the fidelity gate: whatever it left out is here)."""
    pick = _Pick(request.task_id, "facts", seed)
    pairs = []
    for key, v in [(k, v) for s in request.steps for k, v in s.stated.items()] + list(request.identity.items()):
        if _is_owner(key):
            pairs.append(f"your {_words(key)} is {v}")
        elif key in request.identity:
            pairs.append(f"your {_words(key)} is {v}")
        else:
            pairs.append(f"the {_words(key)} is {quote(v, pick((0, 1)))}")
    if not pairs:
        return None
    # why the customer asks, where the policy needs it (Step.reason: a certificate's cancelled flight)
    why = "".join(f" You are asking {s.reason}." for s in request.steps if s.reason)
    style = pick(range(3))
    if style == 0:
        return "You know that " + "; ".join(pairs) + "." + why
    if style == 1:
        return "Details you can give: " + ", ".join(pairs) + "." + why
    return "You have these details. " + " ".join(_cap(p) + "." for p in pairs) + why


# ----- the agent's last word ------------------------------------------------------------------------

DONE_LINES = ("Your request has been handled. Is there anything else?", "Done: I have {what}. Anything else?",
              "All set: I've {what}.", "I have {what}. Is there anything else?",
              "That is taken care of: I have {what}.", "I've {what}. Anything else today?")


def _did(name: str, args: dict) -> str:
    """What a write did, in words the agent says ("created the task 'Pay rent'", "set tsk_4 to completed")."""
    if name == "create_task" and "title" in args:
        return f"created the task {quote(args['title'], 0)}"
    if name == "update_task_status" and {"task_id", "status"} <= set(args):
        return f"set {args['task_id']} to {args['status']}"
    return "handled your request" if not args else f"made the change ({_words(name)})"


def done_line(task_id: str, writes: list[tuple[str, dict]], seed: Any = None) -> str:
    """The agent's report once the gold writes ran: one of a few lines, most saying what was done
    (kit/rollout/fidelity.py: claims_done reads each as the request carried out)."""
    line = _Pick(task_id, "done", seed)(DONE_LINES)
    what = [_did(n, a) for n, a in writes]
    return line.format(what=" and ".join(what) if what else "handled your request")
