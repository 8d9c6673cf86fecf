"""The retail policy's rules (tau2's data/tau2/domains/retail/policy.md). Several of them the tools
check too (a call that breaks them fails, which the validator's `gold_runs` check reports); the
rules say which policy sentence a gold action breaks, and catch what the tools let through
(modifying an order whose items were modified, exchanging an item for itself, acting for two users)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Optional

from kit.envs.rules.gold import before_each, named, violation

if TYPE_CHECKING:
    from kit.envs.domain import Domain

_no = partial(violation, "retail")

MODIFY = ("modify_pending_order_address", "modify_pending_order_payment", "modify_pending_order_items")
ITEM_CHANGES = ("modify_pending_order_items", "exchange_delivered_order_items")
ORDER_ACTIONS = ("cancel_pending_order", *MODIFY, "return_delivered_order_items", "exchange_delivered_order_items")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _order_of(db, action):
    return db.orders.get(action.arguments.get("order_id"))


def retail_cancel_only_pending(domain: "Domain", task) -> Optional[str]:
    """"An order can only be cancelled if its status is 'pending'": the order of a gold
    `cancel_pending_order` is pending when it is cancelled (after the gold actions before it)."""
    for a, db in before_each(domain, task, "cancel_pending_order"):
        order = _order_of(db, a)
        if order is not None and order.status != "pending":
            return _no(retail_cancel_only_pending,
                       f"cannot cancel order {order.order_id}: its status is {order.status!r}")
    return None


def retail_modify_only_pending(domain: "Domain", task) -> Optional[str]:
    """"An order can only be modified if its status is 'pending'" (and after modifying items "the
    order status will be 'pending (items modifed)'. The agent will not be able to modify or cancel
    the order anymore"): the order of a gold `modify_pending_order_*` has status exactly
    "pending" when it is modified. The address and payment tools accept any status containing
    "pending"; this rule does not."""
    for a, db in before_each(domain, task, *MODIFY):
        order = _order_of(db, a)
        if order is not None and order.status != "pending":
            return _no(retail_modify_only_pending,
                       f"cannot {a.name.replace('_', ' ')} of order {order.order_id}: its status is {order.status!r}")
    return None


def retail_return_exchange_only_delivered(domain: "Domain", task) -> Optional[str]:
    """"An order can only be returned if its status is 'delivered'" and "An order can only be
    exchanged if its status is 'delivered'": the order of a gold `return_delivered_order_items` or
    `exchange_delivered_order_items` is delivered at that point."""
    for a, db in before_each(domain, task, "return_delivered_order_items", "exchange_delivered_order_items"):
        order = _order_of(db, a)
        if order is not None and order.status != "delivered":
            verb = "return items of" if a.name.startswith("return") else "exchange items of"
            return _no(retail_return_exchange_only_delivered,
                       f"cannot {verb} order {order.order_id}: its status is {order.status!r}")
    return None


def retail_one_item_change_per_order(domain: "Domain", task) -> Optional[str]:
    """"Exchange or modify order tools can only be called once per order. Be sure that all items to
    be changed are collected into a list before making the tool call!!!": at most one gold
    `modify_pending_order_items` or `exchange_delivered_order_items` per order."""
    seen: set[str] = set()
    for a in named(task, *ITEM_CHANGES):
        oid = a.arguments.get("order_id")
        if oid in seen:
            return _no(retail_one_item_change_per_order,
                       f"order {oid} has its items changed twice: collect every item into one {a.name} call")
        seen.add(oid)
    return None


def retail_item_change_same_product(domain: "Domain", task) -> Optional[str]:
    """"each item can be modified to an available new item of the same product but of different
    product option. There cannot be any change of product types" (and the same for an exchange):
    each new item of a gold `modify_pending_order_items` or `exchange_delivered_order_items` is
    another, available variant of its old item's product.

    An exchange for the very same item is let through: tau2 reads it as replacing a broken item
    (its exchange tool accepts it, its modify tool does not, and its retail tasks 18, 91 and 107
    exchange an item for itself), so only a modification must pick a different option."""
    for a, db in before_each(domain, task, *ITEM_CHANGES):
        order = _order_of(db, a)
        if order is None:
            continue
        product_of = {item.item_id: item.product_id for item in order.items}
        for old, new in zip(a.arguments.get("item_ids") or [], a.arguments.get("new_item_ids") or []):
            product = db.products.get(product_of.get(old, ""))
            variant = product.variants.get(new) if product is not None else None
            why = ("is the same item" if old == new and a.name == "modify_pending_order_items" else
                   f"is not a variant of product {product_of.get(old)}" if variant is None else
                   "is not available" if not variant.available else None)
            if why:
                return _no(retail_item_change_same_product,
                           f"order {order.order_id}: item {old} -> {new}: the new item {why}")
    return None


def retail_refund_to_original_or_gift_card(domain: "Domain", task) -> Optional[str]:
    """"The refund must either go to the original payment method, or an existing gift card.": the
    `payment_method_id` of a gold `return_delivered_order_items` is the order's original payment
    method or a gift card of the order's user."""
    for a, db in before_each(domain, task, "return_delivered_order_items"):
        order = _order_of(db, a)
        if order is None or not order.payment_history:
            continue
        pid, original = a.arguments.get("payment_method_id"), order.payment_history[0].payment_method_id
        user = db.users.get(order.user_id)
        method = user.payment_methods.get(pid) if user is not None else None
        if pid != original and getattr(method, "source", None) != "gift_card":
            return _no(retail_refund_to_original_or_gift_card,
                       f"refund of order {order.order_id} to {pid!r}: neither the original payment method "
                       f"({original}) nor a gift card of {order.user_id}")
    return None


def retail_payment_change_single_new_method(domain: "Domain", task) -> Optional[str]:
    """"The user can only choose a single payment method different from the original payment
    method. If the user wants the modify the payment method to gift card, it must have enough
    balance to cover the total amount.": a gold `modify_pending_order_payment` moves to another
    payment method of the user, a gift card only when its balance covers the order's payment."""
    for a, db in before_each(domain, task, "modify_pending_order_payment"):
        order = _order_of(db, a)
        if order is None or not order.payment_history:
            continue
        pid, first = a.arguments.get("payment_method_id"), order.payment_history[0]
        user = db.users.get(order.user_id)
        method = user.payment_methods.get(pid) if user is not None else None
        why = ("is the original payment method" if pid == first.payment_method_id else
               f"is not a payment method of {order.user_id}" if method is None else
               f"has a balance of {method.balance} < {first.amount}"
               if getattr(method, "source", None) == "gift_card" and method.balance < first.amount else None)
        if why:
            return _no(retail_payment_change_single_new_method, f"order {order.order_id}: new payment {pid!r} {why}")
    return None


def retail_cancel_reason_allowed(domain: "Domain", task) -> Optional[str]:
    """"The user needs to confirm the order id and the reason (either 'no longer needed' or 'ordered
    by mistake') for cancellation. Other reasons are not acceptable.\""""
    for a in named(task, "cancel_pending_order"):
        reason = a.arguments.get("reason")
        if reason not in CANCEL_REASONS:
            return _no(retail_cancel_reason_allowed,
                       f"cancellation reason {reason!r} is neither 'no longer needed' nor 'ordered by mistake'")
    return None


def retail_one_user_per_conversation(domain: "Domain", task) -> Optional[str]:
    """"You can only help one user per conversation (but you can handle multiple requests from the
    same user), and must deny any requests for tasks related to any other user.": every order a
    gold write acts on, and every user whose address it modifies, belongs to one user."""
    owners: dict[str, str] = {}  # user id -> the first action that involved them
    for a, db in before_each(domain, task, *ORDER_ACTIONS, "modify_user_address"):
        if a.name == "modify_user_address":
            owner = a.arguments.get("user_id")
        else:
            order = _order_of(db, a)
            owner = order.user_id if order is not None else None
        if owner is None:
            continue
        owners.setdefault(owner, a.name)
        if len(owners) > 1:
            return _no(retail_one_user_per_conversation,
                       f"gold writes act for several users ({', '.join(owners)}): one user per conversation")
    return None


RULES = (
    retail_cancel_only_pending,
    retail_modify_only_pending,
    retail_return_exchange_only_delivered,
    retail_one_item_change_per_order,
    retail_item_change_same_product,
    retail_refund_to_original_or_gift_card,
    retail_payment_change_single_new_method,
    retail_cancel_reason_allowed,
    retail_one_user_per_conversation,
)
