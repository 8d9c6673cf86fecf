"""What a customer can say about a write call, and what the agent must look up for the rest.

A generator (airline.py, retail.py, telecom.py) returns the full argument dict of a write. Some
of its values are ids that only the database knows: an airline `payment_id` ("gift_card_9320056"),
a retail `item_ids` / `new_item_ids` / `payment_method_id`, a telecom `customer_id` / `line_id` /
`bill_id`. A customer of tau2's domains does not say those; they say "my gift card", "the blue
water bottle", "the line 555-0134", and the agent reads them off a lookup. `customer_view` adds
to a candidate:

  said   argument -> the customer's words for its value (second person, as a scenario says it:
         "paying with your gift card"; "" where the other words already identify it);
  reads  the read calls, in order, whose results hold those values (get_user_details,
         get_order_details, get_product_details, get_customer_by_phone, ...): the gold actions
         before the write, so the write's every value is stated or returned by an earlier call.
  identity  retail: the customer's email. tau2's retail policy has the agent authenticate the customer
         (find their user id by email, or by name and zip) before anything else, even when they give an
         order id: the first read is find_user_id_by_email, the customer says their email.

Values the customer knows stay plain arguments: airline reservation and user ids, passenger
names, flights, bag counts; retail order ids and addresses; telecom amounts and reasons.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from kit.envs.arguments import WriteCandidate


def _payment_words(methods: dict, pid: str) -> Optional[str]:
    """How a customer names one of their payment methods, or None when the words would not single it
    out (two gift cards of the same balance, say)."""
    m = methods.get(pid)
    if m is None:
        return None
    source = m.source
    if source == "credit_card":
        words = f"your {m.brand} credit card ending in {m.last_four}"
        same = [x for x in methods.values() if x.source == source and x.last_four == m.last_four]
    elif source == "paypal":
        words, same = "your PayPal account", [x for x in methods.values() if x.source == "paypal"]
    elif source in ("gift_card", "certificate"):
        kind = "gift card" if source == "gift_card" else "travel certificate"
        same = [x for x in methods.values() if x.source == source]
        amount = getattr(m, "amount", None)
        if amount is None:
            amount = getattr(m, "balance", None)
        if len(same) > 1 and amount is not None:
            words = f"your {kind} with ${amount:g} on it"
            same = [x for x in same if (getattr(x, "amount", None) or getattr(x, "balance", None)) == amount]
        else:
            words = f"your {kind}"
    else:
        return None
    return words if len(same) == 1 else None


def _options(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


# -- airline ---------------------------------------------------------------------------------------
def _airline(db: Any, tool: str, cand: WriteCandidate) -> Optional[WriteCandidate]:
    args = cand.arguments
    if tool == "book_reservation":
        return _airline_booking(db, cand)
    if tool == "send_certificate":
        return _airline_complaint(db, cand)
    if "payment_id" not in args:
        return cand
    reads: list[tuple[str, dict]] = []
    if "reservation_id" in args:
        res = db.reservations.get(args["reservation_id"])
        if res is None:
            return None
        user_id = res.user_id
        reads.append(("get_reservation_details", {"reservation_id": res.reservation_id}))
    elif "user_id" in args:
        user_id = args["user_id"]
    else:
        return cand
    user = db.users.get(user_id)
    words = _payment_words(user.payment_methods, args["payment_id"]) if user else None
    if words is None:
        return None
    reads.append(("get_user_details", {"user_id": user_id}))
    return dataclasses.replace(cand, said={"payment_id": f"paying with {words}"}, reads=tuple(reads))


def _airline_booking(db: Any, cand: WriteCandidate) -> Optional[WriteCandidate]:
    """A booking's payment list: the customer names the method and the amount ("paying the $422 with
    your visa credit card ending in 4310"); the agent finds the method's id in get_user_details."""
    methods = cand.arguments.get("payment_methods") or []
    user = db.users.get(cand.arguments.get("user_id"))
    if user is None or len(methods) != 1:
        return None
    words = _payment_words(user.payment_methods, methods[0]["payment_id"])
    if words is None:
        return None
    return dataclasses.replace(cand, said={"payment_methods": f"paying the ${methods[0]['amount']:g} with {words}"},
                               reads=(("get_user_details", {"user_id": user.user_id}),))


def _airline_complaint(db: Any, cand: WriteCandidate) -> Optional[WriteCandidate]:
    """A certificate is the policy's answer to a complaint: the customer says which flight of which of their
    reservations was cancelled; the agent checks the reservation and the customer's membership first."""
    res = db.reservations.get(cand.knows.get("reservation_id"))
    if res is None:
        return None
    from kit.envs.arguments.airline import _status

    seg = next((s for s in res.flights if _status(db, s) == "cancelled"), None)
    if seg is None:
        return None
    return dataclasses.replace(
        cand, reason=f"because flight {seg.flight_number} on {seg.date} of your reservation {res.reservation_id} "
                     "was cancelled",
        reads=(("get_reservation_details", {"reservation_id": res.reservation_id}),
               ("get_user_details", {"user_id": res.user_id})))


# -- retail ----------------------------------------------------------------------------------------
def _retail(db: Any, tool: str, cand: WriteCandidate) -> Optional[WriteCandidate]:
    args = dict(cand.arguments)
    said: dict[str, str] = {}
    reads: list[tuple[str, dict]] = []
    order = db.orders.get(args["order_id"]) if "order_id" in args else None
    if "order_id" in args and order is None:
        return None
    # the policy's authentication first: the customer gives their email, the agent finds their user id
    owner = db.users.get(args["user_id"] if "user_id" in args else order.user_id if order is not None else None)
    if owner is None or not getattr(owner, "email", None):
        return None
    reads.append(("find_user_id_by_email", {"email": owner.email}))
    if "user_id" in args:  # modify_user_address: the account is the one the email finds
        said["user_id"] = ""
    if order is not None and any(k in args for k in ("item_ids", "new_item_ids", "payment_method_id")):
        reads.append(("get_order_details", {"order_id": order.order_id}))
    if "item_ids" in args and order is not None:
        items = {it.item_id: it for it in order.items}
        named = [items[i] for i in args["item_ids"] if i in items]
        if len(named) != len(args["item_ids"]):
            return None
        labels = [f"the {it.name} ({_options(it.options)})" for it in named]
        # two items of one order that read the same cannot be told apart by the customer
        if len({(it.name, _options(it.options)) for it in order.items if it.item_id in args["item_ids"]}) != len(set(args["item_ids"])):
            return None
        said["item_ids"] = "for " + (" and ".join(labels))
        if "new_item_ids" in args:
            news = []
            for old_id, new_id in zip(args["item_ids"], args["new_item_ids"]):
                product = db.products.get(items[old_id].product_id)
                variant = product.variants.get(new_id) if product else None
                if variant is None:
                    return None
                news.append(f"the {items[old_id].name} ({_options(items[old_id].options)}) to the one with "
                            f"{_options(variant.options)}")
                call = ("get_product_details", {"product_id": product.product_id})
                if call not in reads:
                    reads.append(call)
            said["new_item_ids"] = "switching " + "; and ".join(news)
            said["item_ids"] = ""  # the switch names the items
    if "payment_method_id" in args:
        user = db.users.get(order.user_id) if order is not None else None
        words = _payment_words(user.payment_methods, args["payment_method_id"]) if user else None
        if words is None:
            return None
        if order is not None:
            call = ("get_user_details", {"user_id": order.user_id})
            if call not in reads:
                reads.append(call)
        said["payment_method_id"] = ("with the money going to " if tool == "return_delivered_order_items"
                                     else "using ") + words
    return dataclasses.replace(cand, said=said, reads=tuple(reads), identity={"email": owner.email})


# -- telecom ---------------------------------------------------------------------------------------
def _telecom(db: Any, tool: str, cand: WriteCandidate) -> Optional[WriteCandidate]:
    args = cand.arguments
    phone = cand.knows.get("phone_number")
    if "customer_id" not in args or not phone:
        return cand
    said = {"customer_id": ""}
    reads: list[tuple[str, dict]] = [("get_customer_by_phone", {"phone_number": phone})]
    if "line_id" in args:
        said["line_id"] = f"for the line with the phone number {phone}"
        reads.append(("get_details_by_id", {"id": args["line_id"]}))
    else:
        said["customer_id"] = f"for the account with the phone number {phone}"
    if "bill_id" in args:
        bills = [b for b in db.bills if b.bill_id == args["bill_id"]]
        if not bills:
            return None
        status = getattr(bills[0].status, "value", bills[0].status)
        same = [b for b in db.bills if b.bill_id in next(
            (c.bill_ids for c in db.customers if c.customer_id == args["customer_id"]), [])
            and getattr(b.status, "value", b.status) == status]
        if len(same) != 1:
            return None
        said["bill_id"] = f"for your {str(status).lower().replace('_', ' ')} bill"
        reads.append(("get_bills_for_customer", {"customer_id": args["customer_id"]}))
    return dataclasses.replace(cand, said=said, reads=tuple(reads))


VIEWS: dict[str, Callable[[Any, str, WriteCandidate], Optional[WriteCandidate]]] = {
    "airline": _airline, "retail": _retail, "telecom": _telecom,
}


def customer_view(domain: str, db: Any, tool: str, cand: WriteCandidate) -> Optional[WriteCandidate]:
    """`cand` with `said` and `reads` filled in for `domain`; unchanged where every value is one the
    customer knows; None where the customer's words could not single out a value (drop it)."""
    view = VIEWS.get(domain)
    return cand if view is None else view(db, tool, cand)
