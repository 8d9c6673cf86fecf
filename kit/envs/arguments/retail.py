"""Retail write calls drawn from the store's database under tau2's retail policy.

Every candidate acts on one user's own records, in the state the policy asks for:

  cancel_pending_order            a pending order, with one of the two reasons the policy accepts.
  modify_pending_order_address    a pending order shipped to another address found in the db: the
                                  user's own default address, or another customer's address (a real
                                  address, never an invented one).
  modify_user_address             the user's default address changed to the address of one of their
                                  orders, or to another customer's address.
  modify_pending_order_payment    a pending order paid once, moved to another payment method of the
                                  user (a gift card only when its balance covers the order).
  modify_pending_order_items      a pending order's item(s) changed to other available variants of the
                                  same product, the difference paid by a method of the user (a gift
                                  card only when it covers it).
  exchange_delivered_order_items  the same, on a delivered order.
  return_delivered_order_items    one item or every item of a delivered order, refunded to the
                                  original payment method or a gift card of the user.
"""

from __future__ import annotations

import random
from typing import Any, Optional

from kit.envs.arguments import WriteCandidate, draw
from kit.envs.rules.retail import CANCEL_REASONS

FIELDS = ("address1", "address2", "city", "state", "country", "zip")
OTHER_ADDRESSES = 3  # other customers' addresses offered per record


# -- reading the database -------------------------------------------------------------------------
def _orders(db: Any, fixed: Optional[dict], status: str) -> list:
    """The orders in `status`, narrowed to a fixed order or user."""
    fixed = fixed or {}
    if "order_id" in fixed:
        orders = [db.orders[fixed["order_id"]]] if fixed["order_id"] in db.orders else []
    elif "user_id" in fixed:
        user = db.users.get(fixed["user_id"])
        orders = [db.orders[o] for o in (user.orders if user else []) if o in db.orders]
    else:
        orders = list(db.orders.values())
    return [o for o in orders if o.status == status and o.user_id in db.users]


def _knows(db: Any, order: Any) -> dict:
    # user_id: the account the order belongs to (a later write of the same conversation agrees with it;
    # the customer says their email, and the agent finds the id)
    return {"email": db.users[order.user_id].email, "order_id": order.order_id, "user_id": order.user_id}


def _address(addr: Any) -> dict:
    return {f: getattr(addr, f) for f in FIELDS}


def _where(addr: dict) -> str:
    line = f"{addr['address1']}, {addr['address2']}, " if addr["address2"] else f"{addr['address1']}, "
    return f"{line}{addr['city']}, {addr['state']} {addr['zip']}"


def _others(db: Any, rng: random.Random, but: Any) -> list[dict]:
    """A few addresses of customers other than `but` (a user id), drawn from the db."""
    users = [u for u in db.users.values() if u.user_id != but]
    return [_address(u.address) for u in rng.sample(users, min(OTHER_ADDRESSES, len(users)))]


def _item(it: Any) -> str:
    return f"{it.name} ({', '.join(f'{k} {v}' for k, v in it.options.items())})"


def _payers(user: Any, cost: float, but: str = "") -> list[str]:
    """The user's payment methods other than `but`, a gift card only when its balance covers `cost`."""
    return [pid for pid, m in user.payment_methods.items()
            if pid != but and (m.source != "gift_card" or m.balance >= cost)]


def _what(order: Any) -> str:
    total = sum(it.price for it in order.items)
    return f"order {order.order_id} ({order.status}, {len(order.items)} items, ${total:.2f})"


# -- generators -----------------------------------------------------------------------------------
def cancel_pending_order(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(order, _rng):
        return [WriteCandidate({"order_id": order.order_id, "reason": reason}, _knows(db, order),
                               f"cancel {_what(order)}: {reason}") for reason in CANCEL_REASONS]
    return draw(_orders(db, fixed, "pending"), rng, limit, fixed, options)


def modify_pending_order_address(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(order, rng_):
        old = _address(order.address)
        new = [_address(db.users[order.user_id].address), *_others(db, rng_, order.user_id)]
        return [WriteCandidate({"order_id": order.order_id, **addr}, _knows(db, order),
                               f"ship {_what(order)} to {_where(addr)} instead of {_where(old)}")
                for addr in new if addr != old]
    return draw(_orders(db, fixed, "pending"), rng, limit, fixed, options)


def modify_user_address(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    fixed = fixed or {}
    users = [db.users[fixed["user_id"]]] if fixed.get("user_id") in db.users else (
        [] if "user_id" in fixed else list(db.users.values()))

    def options(user, rng_):
        old = _address(user.address)
        mine = [_address(db.orders[o].address) for o in user.orders if o in db.orders]
        new = []
        for addr in [*mine, *_others(db, rng_, user.user_id)]:
            if addr != old and addr not in new:
                new.append(addr)
        return [WriteCandidate({"user_id": user.user_id, **addr}, {"email": user.email},
                               f"default address of {user.user_id} ({user.email}): {_where(old)} -> {_where(addr)}")
                for addr in new]
    return draw(users, rng, limit, fixed, options)


def modify_pending_order_payment(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(order, _rng):
        pays = order.payment_history
        if len(pays) != 1 or pays[0].transaction_type != "payment":
            return []
        user, first = db.users[order.user_id], pays[0]
        return [WriteCandidate({"order_id": order.order_id, "payment_method_id": pid}, _knows(db, order),
                               f"pay {_what(order)} with {pid} instead of {first.payment_method_id} (${first.amount:.2f})")
                for pid in _payers(user, first.amount, but=first.payment_method_id)]
    return draw(_orders(db, fixed, "pending"), rng, limit, fixed, options)


def _item_changes(db: Any, order: Any, rng: random.Random, verb: str) -> list[WriteCandidate]:
    """Candidates that change one item (each of its other available variants) or two items at once
    (one random pair of variants) of `order` to variants of the same product."""
    items = list({it.item_id: it for it in order.items}.values())
    alts = {}
    for it in items:
        product = db.products.get(it.product_id)
        alts[it.item_id] = [v for v in (product.variants.values() if product else [])
                            if v.available and v.item_id != it.item_id]
    changes = [[(it, v)] for it in items for v in alts[it.item_id]]
    movable = [it for it in items if alts[it.item_id]]
    if len(movable) >= 2:
        pair = rng.sample(movable, 2)
        changes.append([(it, rng.choice(alts[it.item_id])) for it in pair])
    user, out = db.users[order.user_id], []
    for change in changes:
        diff = round(sum(v.price - it.price for it, v in change), 2)
        text = "; ".join(f"{_item(it)} -> {', '.join(f'{k} {x}' for k, x in v.options.items())}" for it, v in change)
        for pid in _payers(user, diff):
            out.append(WriteCandidate(
                {"order_id": order.order_id, "item_ids": [it.item_id for it, _ in change],
                 "new_item_ids": [v.item_id for _, v in change], "payment_method_id": pid}, _knows(db, order),
                f"{verb} in {_what(order)}: {text}; {'pay' if diff >= 0 else 'refund'} ${abs(diff):.2f} with {pid}"))
    return out


def modify_pending_order_items(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    return draw(_orders(db, fixed, "pending"), rng, limit, fixed,
                lambda order, rng_: _item_changes(db, order, rng_, "modify"))


def exchange_delivered_order_items(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    return draw(_orders(db, fixed, "delivered"), rng, limit, fixed,
                lambda order, rng_: _item_changes(db, order, rng_, "exchange"))


def return_delivered_order_items(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(order, _rng):
        user = db.users[order.user_id]
        if not order.payment_history or not order.items:
            return []
        original = order.payment_history[0].payment_method_id
        refund_to = [pid for pid, m in user.payment_methods.items() if pid == original or m.source == "gift_card"]
        choices = [[it] for it in {it.item_id: it for it in order.items}.values()]
        if len(order.items) > 1:
            choices.append(list(order.items))
        return [WriteCandidate({"order_id": order.order_id, "item_ids": [it.item_id for it in items],
                                "payment_method_id": pid}, _knows(db, order),
                               f"return {'every item' if len(items) > 1 else _item(items[0])} of {_what(order)}; "
                               f"refund ${sum(it.price for it in items):.2f} to {pid}")
                for items in choices for pid in refund_to]
    return draw(_orders(db, fixed, "delivered"), rng, limit, fixed, options)


GENERATORS = {
    "cancel_pending_order": cancel_pending_order,
    "exchange_delivered_order_items": exchange_delivered_order_items,
    "modify_pending_order_address": modify_pending_order_address,
    "modify_pending_order_items": modify_pending_order_items,
    "modify_pending_order_payment": modify_pending_order_payment,
    "modify_user_address": modify_user_address,
    "return_delivered_order_items": return_delivered_order_items,
}
