"""Write candidates drawn from the τ² databases (kit/envs/arguments): on the real domains, each
candidate of each generator fits its tool's schema, runs on a fresh fork without error, changes
the database, and, as the only gold action of a task, breaks none of the domain's policy rules.

Coverage (COVERAGE below, checked against the registry): airline 6/6 write tools, retail 7/7,
telecom 6/6. Tools whose success depends on seats or stock (AVAILABILITY) must run and change
state for at least 90% of their candidates, the others for all of them (today all reach 100%).
"Changes the database" is read from the fork's record diff against the pristine state (what
`state_hash` decides, at O(changed records): tau2's full hash costs a second per call on airline);
one candidate per domain is also checked with `state_hash` itself.
"""

import dataclasses
import random

import pytest

from kit.envs import load_domain
from kit.envs.arguments import GENERATORS, WriteCandidate, write_candidates
from kit.envs.rules import BUILTIN_RULES

from tau2.data_model.tasks import Action, EvaluationCriteria, Task, UserScenario

COVERAGE = {  # domain -> (write tools with a generator, write tools of the domain)
    "airline": (6, 6),
    "retail": (7, 7),
    "telecom": (6, 6),
}
AVAILABILITY = {"book_reservation", "update_reservation_flights", "modify_pending_order_items",
                "exchange_delivered_order_items"}
SEEDS = (0, 1, 2)
LIMIT = 5


@pytest.fixture(scope="module")
def domains():
    return {name: load_domain(name) for name in COVERAGE}


def _writes(dom) -> list[str]:
    return sorted(t for t in dom.tool_names("assistant") if dom.tool_kind(t) == "write")


def _task(tool: str, arguments: dict) -> Task:
    """A task whose only gold action is the write (as tests/test_rules.py builds them)."""
    crit = EvaluationCriteria(actions=[Action(action_id="a0", name=tool, arguments=arguments, requestor="assistant")])
    return Task(id="drawn", user_scenario=UserScenario(instructions="drawn"), evaluation_criteria=crit)


def _schema(dom, tool: str) -> dict:
    return next(s["function"]["parameters"] for s in dom.tool_schemas("assistant") if s["function"]["name"] == tool)


def test_coverage_is_what_the_registry_holds(domains):
    for name, (covered, total) in COVERAGE.items():
        writes = _writes(domains[name])
        assert len(writes) == total, writes
        assert sorted(GENERATORS[name]) == sorted(t for t in writes if t in GENERATORS[name])
        assert len(GENERATORS[name]) == covered


@pytest.mark.parametrize("domain,tool", [(d, t) for d in COVERAGE for t in sorted(GENERATORS[d])])
def test_candidates_run_change_state_and_keep_policy(domains, domain, tool):
    dom = domains[domain]
    db = dom.fork(None).agent_db
    schema = _schema(dom, tool)
    ran, drawn = 0, 0
    for seed in SEEDS:
        cands = write_candidates(domain, db, tool, random.Random(seed), limit=LIMIT)
        assert cands, f"{domain}.{tool}: no candidate for seed {seed}"
        assert len(cands) <= LIMIT
        for c in cands:
            assert isinstance(c, WriteCandidate) and c.summary and "\n" not in c.summary
            assert set(c.arguments) <= set(schema["properties"]), c.arguments
            assert set(schema.get("required", [])) <= set(c.arguments), c.arguments
            assert c.knows and all(v not in (None, "") for v in c.knows.values()), c.knows
            env = dom.fork(None)
            obs = env.execute(tool, dict(c.arguments), "assistant")
            drawn += 1
            ran += (not obs.error) and bool(env.diff())
            task = _task(tool, c.arguments)
            broken = [why for rule in BUILTIN_RULES[domain] if (why := rule(dom, task))]
            assert not broken, (c.summary, broken)
    need = 0.9 if tool in AVAILABILITY else 1.0
    assert ran >= need * drawn, f"{domain}.{tool}: {ran}/{drawn} ran and changed state"


def test_state_hash_changes(domains):
    for name, dom in domains.items():
        if not GENERATORS[name]:
            continue
        tool = sorted(GENERATORS[name])[0]
        cand = write_candidates(name, dom.fork(None).agent_db, tool, random.Random(7), limit=1)[0]
        env = dom.fork(None)
        before = env.state_hash()
        assert not env.execute(tool, dict(cand.arguments), "assistant").error
        assert env.state_hash() != before, cand.summary


@pytest.mark.parametrize("domain", list(COVERAGE))
def test_deterministic_given_the_seed(domains, domain):
    db = domains[domain].fork(None).agent_db
    for tool in GENERATORS[domain]:
        a = write_candidates(domain, db, tool, random.Random(3), limit=4)
        b = write_candidates(domain, db, tool, random.Random(3), limit=4)
        assert a == b, tool


FIXED = [  # (domain, tool, the argument or fact to fix, taken from a first draw)
    ("airline", "cancel_reservation", "user_id"),
    ("airline", "update_reservation_baggages", "reservation_id"),
    ("airline", "book_reservation", "user_id"),
    ("airline", "update_reservation_flights", "payment_id"),
    ("retail", "cancel_pending_order", "email"),
    ("retail", "modify_pending_order_items", "order_id"),
    ("retail", "modify_user_address", "user_id"),
    ("telecom", "disable_roaming", "line_id"),
    ("telecom", "suspend_line", "customer_id"),
]


@pytest.mark.parametrize("domain,tool,key", FIXED)
def test_fixed_is_respected(domains, domain, tool, key):
    db = domains[domain].fork(None).agent_db
    first = write_candidates(domain, db, tool, random.Random(0), limit=3)
    for c in first:
        value = c.arguments.get(key, c.knows.get(key))
        again = write_candidates(domain, db, tool, random.Random(1), limit=6, fixed={key: value})
        assert again, (tool, key, value)
        assert all(d.arguments.get(key, d.knows.get(key)) == value for d in again), (key, value)
    wrong = write_candidates(domain, db, tool, random.Random(1), limit=6, fixed={key: "no-such-value"})
    assert wrong == []


def test_none_for_unknown_domain_or_tool(domains):
    db = domains["airline"].fork(None).agent_db
    assert write_candidates("airline", db, "get_user_details", random.Random(0)) is None
    assert write_candidates("airline", db, "no_such_tool", random.Random(0)) is None
    assert write_candidates("no_such_domain", db, "cancel_reservation", random.Random(0)) is None


def test_fixed_user_narrows_retail_orders(domains):
    """A retail customer states an email, not a user id: a fixed user id still narrows the orders."""
    db = domains["retail"].fork(None).agent_db
    user = next(u for u in db.users.values() if any(db.orders[o].status == "pending" for o in u.orders))
    cands = write_candidates("retail", db, "cancel_pending_order", random.Random(0), fixed={"user_id": user.user_id})
    assert cands and all(db.orders[c.arguments["order_id"]].user_id == user.user_id for c in cands)
    assert all(c.knows["email"] == user.email for c in cands)


# -- the customer's view (kit/envs/arguments/customer.py) -------------------------------------------
DB_ONLY = {  # arguments whose values only the database knows: the customer names them in words instead
    "airline": {"payment_id"},
    "retail": {"item_ids", "new_item_ids", "payment_method_id", "user_id"},
    "telecom": {"customer_id", "line_id", "bill_id"},
}


def _leaf_texts(value) -> list[str]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaf_texts(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaf_texts(v)]
    return [str(value)]


@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_the_customer_names_database_only_values_in_words_and_the_reads_return_them(domains, name):
    """With as_customer, every database-only value of a candidate has the customer's words (or is
    identified by the other words), and the candidate's reads, run in order on a fresh fork, all
    succeed and return every such value: the gold (reads, then the write) is grounded without the
    customer ever saying an id only the database holds."""
    dom = domains[name]
    seen_said = 0
    for tool in _writes(dom):
        for seed in SEEDS:
            env = dom.fork(None)
            cands = write_candidates(name, env.agent_db, tool, random.Random(seed), limit=LIMIT, as_customer=True)
            for cand in cands:
                hidden = [k for k in cand.arguments if k in DB_ONLY[name]]
                if name == "airline" and tool == "book_reservation":
                    # the payment list: the method is looked up, the amount is said ("paying the $422 with ...")
                    assert set(cand.said) == {"payment_methods"}, cand.said
                    (method,) = cand.arguments["payment_methods"]
                    assert f"${method['amount']:g} " in cand.said["payment_methods"], cand.said
                    cand = dataclasses.replace(cand, arguments={**cand.arguments, "payment_id": method["payment_id"]},
                                               said={"payment_id": cand.said["payment_methods"]})
                    hidden = ["payment_id"]
                assert set(hidden) <= set(cand.said), (tool, cand.arguments, cand.said)
                if name == "retail":  # the policy's authentication first: the customer's email finds their user id
                    owner = cand.arguments.get("user_id") or env.agent_db.orders[cand.arguments["order_id"]].user_id
                    assert cand.identity == {"email": env.agent_db.users[owner].email}, cand.identity
                    assert cand.reads[0] == ("find_user_id_by_email", cand.identity), cand.reads
                    assert dom.fork(None).execute(*cand.reads[0], "assistant").content.strip('"') == owner
                returned = ""
                run = dom.fork(None)
                for read, args in cand.reads:
                    assert dom.tool_kind(read) == "read", read
                    obs = run.execute(read, dict(args), "assistant")
                    assert not obs.error, (tool, read, args, obs.content[:200])
                    returned += obs.content
                for k in hidden:
                    for leaf in _leaf_texts(cand.arguments[k]):
                        assert leaf in returned, (tool, k, leaf, [r for r, _ in cand.reads])
                seen_said += bool(hidden)
                words = " ".join(cand.said.values())
                for k in hidden:  # no id in the customer's words
                    assert all(leaf not in words for leaf in _leaf_texts(cand.arguments[k])), (tool, k, words)
    assert seen_said > 0


def test_payment_words_single_out_one_method():
    """Two gift cards of different balances are told apart by the amount; two of the same balance
    cannot be, and the candidate is dropped (None)."""
    from types import SimpleNamespace as NS

    from kit.envs.arguments.customer import _payment_words

    methods = {"gift_card_1": NS(source="gift_card", amount=50.0), "gift_card_2": NS(source="gift_card", amount=80.0),
               "credit_card_7": NS(source="credit_card", brand="visa", last_four="1234")}
    assert _payment_words(methods, "gift_card_2") == "your gift card with $80 on it"
    assert _payment_words(methods, "credit_card_7") == "your visa credit card ending in 1234"
    methods["gift_card_3"] = NS(source="gift_card", amount=80.0)
    assert _payment_words(methods, "gift_card_2") is None


@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_every_candidate_leads_to_one_state_whoever_replays_it(domains, name):
    """A task's checker is generated from one run of its gold and must pass every replay of it: a write
    whose result differs between two fresh forks (telecom's refuel on a customer without a draft bill
    opens a bill with a uuid4 id) can never be a task. Each candidate, run on two forks, leaves equal
    states."""
    dom = domains[name]
    for tool in _writes(dom):
        cands = write_candidates(name, dom.fork(None).agent_db, tool, random.Random(0), limit=LIMIT) or []
        for cand in cands:
            prints = []
            for _ in range(2):
                env = dom.fork(None)
                obs = env.execute(tool, dict(cand.arguments), "assistant")
                assert not obs.error, (tool, cand.arguments, obs.content[:200])
                prints.append(env.fingerprint())
            assert prints[0] == prints[1], (tool, cand.arguments)
