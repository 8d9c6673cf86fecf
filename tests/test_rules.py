"""The coded policy rules of the τ² domains (kit/envs/rules): each rule on a hand-made task where it
holds and one where it fails (real ids of the domain's database), and every rule over tau2's own
tasks, where the only refusals are the known disagreements listed below."""

import pytest

from kit.envs import load_domain
from kit.envs.rules import BUILTIN_RULES, airline, retail, telecom

from tau2.data_model.tasks import Action, EvaluationCriteria, Task, UserScenario


def _task(*calls, base=None) -> Task:
    """A task whose gold actions are `calls`: (name, arguments) or (name, arguments, requestor).
    `base`: a task whose initial state (and scenario) the new task keeps."""
    actions = [Action(action_id=f"a{i}", name=c[0], arguments=c[1], requestor=c[2] if len(c) > 2 else "assistant")
               for i, c in enumerate(calls)]
    crit = EvaluationCriteria(actions=actions)
    if base is not None:
        return base.model_copy(update={"id": "hand-made", "evaluation_criteria": crit})
    return Task(id="hand-made", user_scenario=UserScenario(instructions="hand-made"), evaluation_criteria=crit)


def _holds_and_fails(domain, rule, ok: Task, bad: Task, expected: str):
    """The rule says nothing of `ok`; of `bad` it says `expected` (a fragment), named as the rule."""
    dom = load_domain(domain)
    assert rule(dom, ok) is None, rule(dom, ok)
    why = rule(dom, bad)
    assert why is not None and why.startswith(f"{domain} policy ({rule.__name__}): "), why
    assert expected in why, why


def test_every_builtin_rule_is_documented_and_tested_here():
    tested = {rule.__name__ for cases in (AIRLINE, RETAIL, TELECOM) for rule, *_ in cases}
    for domain, rules in BUILTIN_RULES.items():
        assert load_domain(domain).policy_rules == rules
        for rule in rules:
            assert rule.__name__.startswith(domain + "_") and rule.__doc__ and '"' in rule.__doc__, rule
            assert rule.__name__ in tested, f"{rule.__name__} has no test in tests/test_rules.py"


# -- airline --------------------------------------------------------------------------------------
def _cancel(rid):
    return _task(("cancel_reservation", {"reservation_id": rid}))


def _flights(rid, cabin, flights=None, payment_id="credit_card_0000000"):
    if flights is None:
        res = load_domain("airline").pristine_agent_db.reservations[rid]
        flights = [{"flight_number": f.flight_number, "date": f.date} for f in res.flights]
    return _task(("update_reservation_flights",
                  {"reservation_id": rid, "cabin": cabin, "flights": flights, "payment_id": payment_id}))


def _bags(rid, total, nonfree, payment_id="gift_card_3576581"):
    return _task(("update_reservation_baggages", {"reservation_id": rid, "total_baggages": total,
                                                   "nonfree_baggages": nonfree, "payment_id": payment_id}))


PASSENGER = {"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}


def _book(user_id, payments, passengers=1, cabin="economy", total=0, nonfree=0):
    return _task(("book_reservation", {
        "user_id": user_id, "origin": "JFK", "destination": "SEA", "flight_type": "one_way", "cabin": cabin,
        "flights": [{"flight_number": "HAT083", "date": "2024-05-24"}], "passengers": [PASSENGER] * passengers,
        "payment_methods": [{"payment_id": p, "amount": 1} for p in payments],
        "total_baggages": total, "nonfree_baggages": nonfree, "insurance": "no"}))


def _passengers(rid, n):
    return _task(("update_reservation_passengers", {"reservation_id": rid, "passengers": [PASSENGER] * n}))


def _certificate(user_id, amount):
    return _task(("send_certificate", {"user_id": user_id, "amount": amount}))


AIRLINE = [
    (airline.airline_no_cancel_after_flown, _cancel("4WQ150"), _cancel("NQNU5R"),
     "cannot cancel reservation NQNU5R: segment HAT214 on 2024-05-13 has landed"),
    # VAAOXJ: economy, no insurance, booked 2024-05-0x; 4WQ150 is business (1YVFB9, 521ARH, CDXEBS below)
    (airline.airline_cancellation_eligibility, _cancel("4WQ150"), _cancel("VAAOXJ"),
     "cannot cancel reservation VAAOXJ: economy, no travel insurance"),
    # T1QOBS is basic economy: a cabin change keeps the flights, a flight change does not
    (airline.airline_basic_economy_not_modified, _flights("T1QOBS", "economy"),
     _flights("T1QOBS", "basic_economy", [{"flight_number": "HAT083", "date": "2024-05-24"}]),
     "reservation T1QOBS is basic economy: its flights cannot be modified"),
    # 3JHISE (economy) has a flown segment
    (airline.airline_no_cabin_change_after_flown, _flights("3JHISE", "economy"), _flights("3JHISE", "business"),
     "cannot change the cabin of reservation 3JHISE from economy to business"),
    # VA5SGQ: round trip DTW -> LGA (tau2's airline task 29 moves it to JFK)
    (airline.airline_modify_keeps_origin_destination, _flights("VA5SGQ", "economy"),
     _flights("VA5SGQ", "economy", [{"flight_number": "HAT169", "date": "2024-05-17"},
                                    {"flight_number": "HAT033", "date": "2024-05-19"}]),
     "new flights of reservation VA5SGQ go DTW -> JFK -> DTW, but the round_trip reservation is DTW -> LGA"),
    # M20IZO belongs to aarav_ahmed_6699: two credit cards and a certificate
    (airline.airline_flight_change_paid_by_card, _flights("M20IZO", "economy", payment_id="credit_card_9074831"),
     _flights("M20IZO", "economy", payment_id="certificate_9645872"), "'certificate_9645872', which is a certificate"),
    (airline.airline_at_most_five_passengers, _book("olivia_jackson_4826", ["credit_card_1658508"], passengers=5),
     _book("olivia_jackson_4826", ["credit_card_1658508"], passengers=6),
     "book_reservation with 6 passengers (at most five)"),
    (airline.airline_passenger_count_unchanged, _passengers("4WQ150", 3), _passengers("4WQ150", 2),
     "reservation 4WQ150 has 3 passengers, the update gives 2"),
    # 4WQ150 has 5 bags, none paid; silver member, business, 3 passengers: 9 free
    (airline.airline_no_bag_removal, _bags("4WQ150", 6, 0), _bags("4WQ150", 4, 0),
     "reservation 4WQ150 has 5 bags (0 paid); the update gives 4 (0 paid): bags cannot be removed"),
    (airline.airline_nonfree_bags_match_allowance, _bags("4WQ150", 10, 1), _bags("4WQ150", 10, 0),
     "reservation 4WQ150: 10 bags with 9 free (silver member, business, 3 passengers) means 1 paid, not 0"),
    (airline.airline_booking_payment_limits, _book("aarav_ahmed_6699", ["credit_card_9074831", "certificate_9645872"]),
     _book("aarav_ahmed_6699", ["credit_card_9074831", "credit_card_4959530"]), "2 credit cards"),
    (airline.airline_payment_in_profile, _book("olivia_jackson_4826", ["credit_card_1658508"]),
     _book("olivia_jackson_4826", ["credit_card_9074831"]),
     "book_reservation pays with 'credit_card_9074831', not in the profile of olivia_jackson_4826"),
    # olivia_jackson_4826: regular, her reservations neither insured nor business; chen_jackson_3290: silver
    (airline.airline_certificate_eligibility, _certificate("chen_jackson_3290", 300),
     _certificate("olivia_jackson_4826", 200),
     "olivia_jackson_4826 is a regular member with no insured or business reservation"),
    (airline.airline_certificate_amount, _certificate("chen_jackson_3290", 300), _certificate("chen_jackson_3290", 123),
     "certificate of 123 for chen_jackson_3290"),
]


@pytest.mark.parametrize("rule,ok,bad,expected", AIRLINE, ids=[c[0].__name__ for c in AIRLINE])
def test_airline_rule_holds_and_fails(rule, ok, bad, expected):
    _holds_and_fails("airline", rule, ok, bad, expected)


def test_airline_cancellation_is_refused_only_when_certainly_forbidden():
    dom = load_domain("airline")
    rule = airline.airline_cancellation_eligibility
    # booked within 24 hours (1YVFB9), a segment cancelled by the airline (521ARH), insured (CDXEBS)
    assert [rule(dom, _cancel(rid)) for rid in ("1YVFB9", "521ARH", "CDXEBS")] == [None, None, None]
    booked = dom.pristine_agent_db.reservations["VAAOXJ"].created_at
    assert rule(dom, _cancel("VAAOXJ")) == (
        "airline policy (airline_cancellation_eligibility): cannot cancel reservation VAAOXJ: economy, no travel "
        f"insurance, booked {booked} (more than 24 hours before 2024-05-15T15:00:00) and no flight cancelled by "
        "the airline")


def test_airline_booking_pays_with_at_most_one_certificate():
    dom = load_domain("airline")
    two = _book("mohamed_silva_9265", ["certificate_3765853", "certificate_9984806"])
    assert airline.airline_booking_payment_limits(dom, two).endswith(
        "booking pays with 2 certificates (at most one certificate, one credit card, three gift cards)")


# -- retail ---------------------------------------------------------------------------------------
PENDING, DELIVERED, PROCESSED, OTHER_USERS = "#W4862767", "#W5866402", "#W5353646", "#W6977171"
# PENDING: sophia_thomas_5301, paid with paypal_5297429 (2492.53); gift_card_9178183 holds 66
#   item 8479046075 of product 8600330539: 8895454203 is available, 7373893106 is not
# DELIVERED: olivia_ito_3591, paid with paypal_8049766; gift_card_7794233, credit_card_9753331
#   item 6242772310 of product 4354588079, whose variant 3709608322 is available


def _cancel_order(order_id, reason="no longer needed"):
    return ("cancel_pending_order", {"order_id": order_id, "reason": reason})


def _address(order_id):
    return ("modify_pending_order_address", {"order_id": order_id, "address1": "1 Main St", "address2": "",
                                             "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"})


def _items(order_id, old, new, payment="paypal_5297429", name="modify_pending_order_items"):
    return (name, {"order_id": order_id, "item_ids": [old], "new_item_ids": [new], "payment_method_id": payment})


def _return(order_id, item="6242772310", payment="paypal_8049766"):
    return ("return_delivered_order_items", {"order_id": order_id, "item_ids": [item], "payment_method_id": payment})


def _pay(order_id, payment):
    return ("modify_pending_order_payment", {"order_id": order_id, "payment_method_id": payment})


RETAIL = [
    (retail.retail_cancel_only_pending, _task(_cancel_order(PENDING)), _task(_cancel_order(PROCESSED)),
     "cannot cancel order #W5353646: its status is 'processed'"),
    # the address tool accepts 'pending (item modified)'; the policy does not
    (retail.retail_modify_only_pending, _task(_address(PENDING), _items(PENDING, "8479046075", "8895454203")),
     _task(_items(PENDING, "8479046075", "8895454203"), _address(PENDING)),
     "cannot modify pending order address of order #W4862767: its status is 'pending (item modified)'"),
    (retail.retail_return_exchange_only_delivered, _task(_return(DELIVERED)), _task(_return(PENDING, "8479046075")),
     "cannot return items of order #W4862767: its status is 'pending'"),
    (retail.retail_one_item_change_per_order, _task(_items(PENDING, "8479046075", "8895454203")),
     _task(_items(PENDING, "8479046075", "8895454203"), _items(PENDING, "8895454203", "8479046075")),
     "order #W4862767 has its items changed twice"),
    (retail.retail_item_change_same_product, _task(_items(PENDING, "8479046075", "8895454203")),
     _task(_items(PENDING, "8479046075", "7373893106")),
     "order #W4862767: item 8479046075 -> 7373893106: the new item is not available"),
    (retail.retail_refund_to_original_or_gift_card, _task(_return(DELIVERED, payment="gift_card_7794233")),
     _task(_return(DELIVERED, payment="credit_card_9753331")),
     "refund of order #W5866402 to 'credit_card_9753331': neither the original payment method (paypal_8049766)"),
    (retail.retail_payment_change_single_new_method, _task(_pay(PENDING, "credit_card_7326294")),
     _task(_pay(PENDING, "paypal_5297429")), "order #W4862767: new payment 'paypal_5297429' is the original"),
    (retail.retail_cancel_reason_allowed, _task(_cancel_order(PENDING, "ordered by mistake")),
     _task(_cancel_order(PENDING, "found it cheaper")), "cancellation reason 'found it cheaper' is neither"),
    (retail.retail_one_user_per_conversation,
     _task(_return(DELIVERED), ("modify_user_address", {"user_id": "olivia_ito_3591", "address1": "1 Main St",
                                                        "address2": "", "city": "Austin", "state": "TX",
                                                        "country": "USA", "zip": "78701"})),
     _task(_return(DELIVERED), _return(OTHER_USERS, "1151293680", "gift_card_6052478")),
     "gold writes act for several users (olivia_ito_3591, sophia_jackson_6355)"),
]


@pytest.mark.parametrize("rule,ok,bad,expected", RETAIL, ids=[c[0].__name__ for c in RETAIL])
def test_retail_rule_holds_and_fails(rule, ok, bad, expected):
    _holds_and_fails("retail", rule, ok, bad, expected)


def test_retail_item_rules_more_cases():
    dom = load_domain("retail")
    same = retail.retail_item_change_same_product
    assert "is the same item" in same(dom, _task(_items(PENDING, "8479046075", "8479046075")))
    assert "is not a variant of product 8600330539" in same(dom, _task(_items(PENDING, "8479046075", "3709608322")))
    # an exchange for the very same item is a replacement: tau2's retail tasks 18, 91 and 107 do it
    db = dom.pristine_agent_db
    order, item = next((o, i) for o in db.orders.values() if o.status == "delivered" for i in o.items
                       if getattr(db.products[i.product_id].variants.get(i.item_id), "available", False))
    assert same(dom, _task(_items(order.order_id, item.item_id, item.item_id, "gift_card_0000000",
                                  "exchange_delivered_order_items"))) is None
    assert "has a balance of 66.0 < 2492.53" in retail.retail_payment_change_single_new_method(
        dom, _task(_pay(PENDING, "gift_card_9178183")))


# -- telecom --------------------------------------------------------------------------------------
SUSPENDED = "[service_issue]overdue_bill_suspension[PERSONA:Easy]"  # C1001's L1002, suspended for B1234321


def _suspended(contract_ended=False) -> Task:
    base = load_domain("telecom").task(SUSPENDED)
    if contract_ended:
        state = base.initial_state.model_copy(deep=True)
        for action in state.initialization_actions:
            if action.func_name == "suspend_line_for_overdue_bill":
                action.arguments["contract_ended"] = True
        base = base.model_copy(update={"initial_state": state})
    return base


PAY_AND_RESUME = [("send_payment_request", {"customer_id": "C1001", "bill_id": "B1234321"}),
                  ("make_payment", {}, "user"),
                  ("resume_line", {"customer_id": "C1001", "line_id": "L1002"})]


def _refuel(*amounts):
    return _task(*[("refuel_data", {"customer_id": "C1001", "line_id": "L1001", "gb_amount": gb}) for gb in amounts])


TELECOM = [
    (telecom.telecom_refuel_at_most_2gb, _refuel(2.0), _refuel(1.5, 1.0),
     "refuels 2.5 GB on line L1001 (at most 2 GB)"),
    (telecom.telecom_payment_request_only_for_overdue, _task(*PAY_AND_RESUME, base=_suspended()),
     _task(("send_payment_request", {"customer_id": "C1001", "bill_id": "B1002"}), base=_suspended()),
     "payment request for bill B1002, whose status is 'Issued', not overdue"),
    (telecom.telecom_resume_only_when_bills_paid, _task(*PAY_AND_RESUME, base=_suspended()),
     _task(PAY_AND_RESUME[0], PAY_AND_RESUME[2], base=_suspended()),
     "cannot resume line L1002: bill(s) B1234321 of C1001 not paid"),
    (telecom.telecom_no_resume_after_contract_end, _task(*PAY_AND_RESUME, base=_suspended()),
     _task(*PAY_AND_RESUME, base=_suspended(contract_ended=True)),
     "cannot resume line L1002: its contract ended 2025-01-31"),
]


@pytest.mark.parametrize("rule,ok,bad,expected", TELECOM, ids=[c[0].__name__ for c in TELECOM])
def test_telecom_rule_holds_and_fails(rule, ok, bad, expected):
    _holds_and_fails("telecom", rule, ok, bad, expected)


# -- tau2's own tasks -----------------------------------------------------------------------------
# (domain, task id) -> the rules that refuse tau2's gold, and why tau2 disagrees with its own policy.
# A new refusal fails the test: fix the rule, or add the task here with the reason.
KNOWN_DISAGREEMENTS = {
    # The gold upgrades XEHM4B (basic economy, no insurance, booked 2024-05-01) to economy, then
    # cancels it: neither booked within 24 h, nor business, nor insured, nor cancelled by the airline.
    ("airline", "7"): ["airline_cancellation_eligibility"],
    # Tasks 9 and 37 cancel NQNU5R, whose two segments have landed ("if any portion of the flight
    # has already been flown, the agent cannot help").
    ("airline", "9"): ["airline_no_cancel_after_flown"],
    ("airline", "37"): ["airline_no_cancel_after_flown"],
    # The gold moves VA5SGQ's round trip DTW -> LGA to DTW -> JFK: a change of destination.
    ("airline", "29"): ["airline_modify_keeps_origin_destination"],
    # The gold charges gold member yara_garcia_1905 for 2 bags in economy, where 3 are free (the
    # same annotation was flagged upstream in tau-bench, sierra-research/tau-bench pull request 32).
    ("airline", "33"): ["airline_nonfree_bags_match_allowance"],
    # The gold shows a call the tool refuses: a refund to PayPal, which is neither the original
    # payment method nor a gift card (then a transfer to a human); the rule reports the attempt.
    ("retail", "12"): ["retail_refund_to_original_or_gift_card"],
    ("retail", "13"): ["retail_refund_to_original_or_gift_card"],
    # The gold first tries an exchange on #W7464385, which is pending (the tool refuses it), then
    # modifies its items: two item changes of one order, one on an order that is not delivered.
    ("retail", "64"): ["retail_return_exchange_only_delivered", "retail_one_item_change_per_order"],
}


def _refusals(domain: str) -> dict:
    dom = load_domain(domain)
    found = {}
    for task in dom.tasks(None):
        names = [why.split("(", 1)[1].split(")", 1)[0] for why in dom.policy_violations(task)]
        if names:
            found[(domain, task.id)] = names
    return found


def test_no_rule_refuses_a_tau2_gold_task_but_the_known_disagreements():
    found = {}
    for domain in ("airline", "retail", "telecom"):
        found.update(_refusals(domain))
    assert found == KNOWN_DISAGREEMENTS


def test_the_replay_script_prints_per_domain_counts_and_refusals(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "scripts" / "replay_policy_rules.py"
    spec = importlib.util.spec_from_file_location("replay_policy_rules", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["airline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("airline: 50 tasks, 30 with writes, 5 refused\n")
    assert "  9: airline policy (airline_no_cancel_after_flown): cannot cancel reservation NQNU5R" in out
