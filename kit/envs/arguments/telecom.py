"""Telecom write calls drawn from the carrier's database under tau2's telecom policy.

Every candidate names a customer and one of their own lines or bills, in the state the tool and
the policy ask for:

  suspend_line          an active line of a customer with an overdue bill, or whose contract has
                        ended (the two reasons the policy gives for a suspension, which is the
                        `reason`: "overdue bill B1005", "contract ended 2024-12-31").
  resume_line           a suspended (or pending activation) line whose customer has no overdue or
                        awaiting-payment bill and whose contract has not ended.
  send_payment_request  an overdue bill of a customer with no bill already awaiting payment.
  enable_roaming        an active line with roaming off.
  disable_roaming       a line with roaming on.
  refuel_data           an active line on a known plan, 0.5 to 2 GB (the policy's maximum, less what
                        the line has already been refuelled), priced by the plan.
"""

from __future__ import annotations

import random
from typing import Any, Iterator, Optional

from kit.envs.arguments import WriteCandidate, draw
from kit.envs.rules.telecom import MAX_REFUEL_GB, TODAY, UNPAID

STEPS_GB = (0.5, 1.0, 1.5, 2.0)


def _status(value: Any) -> str:
    return getattr(value, "value", value)


def _by_id(rows: list, field: str, key: Any) -> Optional[Any]:
    return next((r for r in rows if getattr(r, field) == key), None)


def _bills(db: Any, customer: Any) -> list:
    return [b for bid in customer.bill_ids if (b := _by_id(db.bills, "bill_id", bid)) is not None]


def _lines(db: Any) -> Iterator[tuple[Any, Any]]:
    """(customer, line) for every line a customer holds (only pairs that exist in the db)."""
    for customer in db.customers:
        for lid in customer.line_ids:
            line = _by_id(db.lines, "line_id", lid)
            if line is not None:
                yield customer, line


def _ended(line: Any) -> bool:
    return line.contract_end_date is not None and line.contract_end_date < TODAY


def _line_call(customer: Any, line: Any, summary: str, **extra: Any) -> WriteCandidate:
    return WriteCandidate({"customer_id": customer.customer_id, "line_id": line.line_id, **extra},
                          {"customer_id": customer.customer_id, "phone_number": line.phone_number},
                          f"{summary} line {line.line_id} ({line.phone_number}) of {customer.full_name} "
                          f"({customer.customer_id})")


def _per_line(db, rng: random.Random, limit: int, fixed: Optional[dict], options) -> list[WriteCandidate]:
    return draw(list(_lines(db)), rng, limit, fixed, lambda pair, rng_: options(*pair))


# -- generators -----------------------------------------------------------------------------------
def suspend_line(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(customer, line):
        if _status(line.status) != "Active":
            return []
        overdue = [b.bill_id for b in _bills(db, customer) if _status(b.status) == "Overdue"]
        why = (f"overdue bill {overdue[0]}" if overdue else
               f"contract ended {line.contract_end_date}" if _ended(line) else None)
        return [_line_call(customer, line, f"suspend ({why})", reason=why)] if why else []
    return _per_line(db, rng, limit, fixed, options)


def resume_line(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(customer, line):
        if _status(line.status) not in ("Suspended", "Pending Activation") or _ended(line):
            return []
        if any(_status(b.status) in UNPAID for b in _bills(db, customer)):
            return []
        return [_line_call(customer, line, f"resume ({_status(line.status).lower()}, bills settled)")]
    return _per_line(db, rng, limit, fixed, options)


def send_payment_request(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(customer, _rng):
        bills = _bills(db, customer)
        if any(_status(b.status) == "Awaiting Payment" for b in bills):
            return []  # "A user can only have one bill in the AWAITING PAYMENT status at a time."
        return [WriteCandidate({"customer_id": customer.customer_id, "bill_id": b.bill_id},
                               {"customer_id": customer.customer_id, "phone_number": customer.phone_number},
                               f"payment request for overdue bill {b.bill_id} (${b.total_due:.2f}, period from "
                               f"{b.period_start}) of {customer.full_name} ({customer.customer_id})")
                for b in bills if _status(b.status) == "Overdue"]
    return draw(list(db.customers), rng, limit, fixed, options)


def enable_roaming(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    return _per_line(db, rng, limit, fixed, lambda customer, line: (
        [_line_call(customer, line, "enable roaming on")]
        if _status(line.status) == "Active" and not line.roaming_enabled else []))


def disable_roaming(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    return _per_line(db, rng, limit, fixed, lambda customer, line: (
        [_line_call(customer, line, "disable roaming on")] if line.roaming_enabled else []))


def refuel_data(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(customer, line):
        plan = _by_id(db.plans, "plan_id", line.plan_id)
        if plan is None or _status(line.status) != "Active":
            return []
        # the charge goes on the customer's draft bill; without one, tau2's tool opens a bill with a random
        # id (uuid4), a state no replay reproduces, so the task's checker could never pass its own gold
        if not any(_status(b.status) == "Draft" for b in _bills(db, customer)):
            return []
        room = MAX_REFUEL_GB - (line.data_refueling_gb or 0.0)
        return [_line_call(customer, line, f"refuel {gb:g} GB (${gb * plan.data_refueling_price_per_gb:.2f}, "
                                           f"{plan.name}) on", gb_amount=gb)
                for gb in STEPS_GB if gb <= room + 1e-9]
    return _per_line(db, rng, limit, fixed, options)


GENERATORS = {
    "disable_roaming": disable_roaming,
    "enable_roaming": enable_roaming,
    "refuel_data": refuel_data,
    "resume_line": resume_line,
    "send_payment_request": send_payment_request,
    "suspend_line": suspend_line,
}
