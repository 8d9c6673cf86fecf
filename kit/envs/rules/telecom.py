"""The telecom policy's line and billing rules (tau2's data/tau2/domains/telecom/main_policy.md)
that its write tools leave to the agent: refuelling, payment requests, lifting a suspension."""

from __future__ import annotations

import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Optional

from kit.envs.rules.gold import before_each, named, violation

if TYPE_CHECKING:
    from kit.envs.domain import Domain

_no = partial(violation, "telecom")

TODAY = datetime.date(2025, 2, 25)  # "The current time is 2025-02-25 12:08:00 EST."
MAX_REFUEL_GB = 2.0
UNPAID = ("Overdue", "Awaiting Payment")  # an overdue bill stays unpaid while its payment request waits


def _by_id(rows: list, field: str, key: Any) -> Optional[Any]:
    return next((r for r in rows if getattr(r, field) == key), None)


def _status(value: Any) -> str:
    return getattr(value, "value", value)


def telecom_refuel_at_most_2gb(domain: "Domain", task) -> Optional[str]:
    """"The maximum amount of data that can be refueled is 2GB.": the gold `refuel_data` calls of
    a task add at most 2 GB to any one line."""
    per_line: dict[str, float] = {}
    for a in named(task, "refuel_data"):
        line = a.arguments.get("line_id")
        per_line[line] = per_line.get(line, 0.0) + float(a.arguments.get("gb_amount") or 0)
        if per_line[line] > MAX_REFUEL_GB + 1e-9:
            return _no(telecom_refuel_at_most_2gb, f"refuels {per_line[line]:g} GB on line {line} (at most 2 GB)")
    return None


def telecom_payment_request_only_for_overdue(domain: "Domain", task) -> Optional[str]:
    """"Check the bill status to make sure it is overdue. ... The send payement request tool will
    not check if the bill is overdue. You should always check that the bill is overdue before
    sending a payment request.": the bill of a gold `send_payment_request` is Overdue then."""
    for a, db in before_each(domain, task, "send_payment_request"):
        bill = _by_id(db.bills, "bill_id", a.arguments.get("bill_id"))
        if bill is not None and _status(bill.status) != "Overdue":
            return _no(telecom_payment_request_only_for_overdue,
                       f"payment request for bill {bill.bill_id}, whose status is "
                       f"{_status(bill.status)!r}, not overdue")
    return None


def telecom_resume_only_when_bills_paid(domain: "Domain", task) -> Optional[str]:
    """"You are allowed to lift the suspension after the user has paid all their overdue bills.": when
    a gold `resume_line` runs, no bill of the customer is Overdue or Awaiting Payment (the gold
    actions before it, the user's `make_payment` among them, applied)."""
    for a, db in before_each(domain, task, "resume_line"):
        customer = _by_id(db.customers, "customer_id", a.arguments.get("customer_id"))
        if customer is None:
            continue
        unpaid = [b.bill_id for bid in customer.bill_ids
                  if (b := _by_id(db.bills, "bill_id", bid)) is not None and _status(b.status) in UNPAID]
        if unpaid:
            return _no(telecom_resume_only_when_bills_paid,
                       f"cannot resume line {a.arguments.get('line_id')}: bill(s) {', '.join(unpaid)} of "
                       f"{customer.customer_id} not paid")
    return None


def telecom_no_resume_after_contract_end(domain: "Domain", task) -> Optional[str]:
    """"You are not allowed to lift the suspension if the line's contract end date is in the past,
    even if the user has paid all their overdue bills.": the line of a gold `resume_line` has no
    contract end date before today (2025-02-25)."""
    for a, db in before_each(domain, task, "resume_line"):
        line = _by_id(db.lines, "line_id", a.arguments.get("line_id"))
        end = getattr(line, "contract_end_date", None)
        if end is not None and end < TODAY:
            return _no(telecom_no_resume_after_contract_end,
                       f"cannot resume line {line.line_id}: its contract ended {end}")
    return None


RULES = (
    telecom_refuel_at_most_2gb,
    telecom_payment_request_only_for_overdue,
    telecom_resume_only_when_bills_paid,
    telecom_no_resume_after_contract_end,
)
