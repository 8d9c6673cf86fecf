"""The airline policy's rules (tau2's data/tau2/domains/airline/policy.md) that its tools leave to
the agent. Each docstring quotes the policy sentence the rule encodes."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Optional

from kit.envs.rules.gold import before_each, named, violation

if TYPE_CHECKING:
    from kit.envs.domain import Domain

_no = partial(violation, "airline")

NOW = "2024-05-15T15:00:00"  # "The current time is 2024-05-15 15:00:00 EST."
DAY_BEFORE = "2024-05-14T15:00:00"  # a reservation created at or after this was booked within 24 hours
USED = ("landed", "flying")  # a segment whose flight, on its date, has left: the segment is used
FREE_BAGS = {  # membership -> cabin -> free checked bags per passenger
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
MAX_PAYMENTS = {"certificate": 1, "credit_card": 1, "gift_card": 3}


# -- reading the database -------------------------------------------------------------------------
def _segment_status(db: Any, seg: Any) -> Optional[str]:
    """The status of a reservation segment's flight on the segment's date (None: unknown)."""
    flight = db.flights.get(seg.flight_number)
    day = flight.dates.get(seg.date) if flight is not None else None
    return getattr(day, "status", None)


def _used_segment(db: Any, res: Any) -> Optional[Any]:
    """The first segment of the reservation that has flown (landed or flying), or None."""
    return next((s for s in res.flights if _segment_status(db, s) in USED), None)


def _source(user: Any, payment_id: str) -> Optional[str]:
    """credit_card, gift_card or certificate: the kind of the user's payment method (None: not theirs)."""
    method = user.payment_methods.get(payment_id) if user is not None else None
    return getattr(method, "source", None)


def _free_bags(membership: str, cabin: str, passengers: int) -> int:
    return FREE_BAGS.get(membership, {}).get(cabin, 0) * passengers


# -- cancel ---------------------------------------------------------------------------------------
def airline_no_cancel_after_flown(domain: "Domain", task) -> Optional[str]:
    """"If any portion of the flight has already been flown, the agent cannot help and transfer is
    needed": a gold `cancel_reservation` of a reservation with a used segment breaks it. A
    reservation's segments carry no status of their own; the flight's status on the segment's date
    (flights table) says whether it has left. tau2's own airline tasks 9 and 37 cancel NQNU5R,
    whose two segments have landed: the rule is checked on synthesized tasks only (the engine's
    validator); tests/test_rules.py lists those two as known disagreements."""
    for a, db in before_each(domain, task, "cancel_reservation"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        seg = _used_segment(db, res) if res is not None else None
        if seg is not None:
            return _no(airline_no_cancel_after_flown,
                       f"cannot cancel reservation {res.reservation_id}: segment {seg.flight_number} on "
                       f"{seg.date} has {_segment_status(db, seg)}")
    return None


def airline_cancellation_eligibility(domain: "Domain", task) -> Optional[str]:
    """"Flight can be cancelled if any of the following is true: the booking was made within the
    last 24 hrs; the flight is cancelled by airline; it is a business flight; the user has travel
    insurance and the reason for cancellation is covered by insurance."

    The reason the user gave is not in the gold actions, so the insurance case cannot be judged:
    the rule refuses only what is certainly forbidden whatever the reason, a `cancel_reservation`
    of a reservation that is not business, has no insurance, was created more than 24 hours
    before the policy's current time (2024-05-15 15:00 EST), and has no segment the airline
    cancelled."""
    for a, db in before_each(domain, task, "cancel_reservation"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        if res is None or res.cabin == "business" or res.insurance == "yes" or res.created_at >= DAY_BEFORE:
            continue
        if any(_segment_status(db, s) == "cancelled" for s in res.flights):
            continue
        return _no(airline_cancellation_eligibility,
                   f"cannot cancel reservation {res.reservation_id}: {res.cabin}, no travel insurance, booked "
                   f"{res.created_at} (more than 24 hours before {NOW}) and no flight cancelled by the airline")
    return None


# -- modify flights -------------------------------------------------------------------------------
def airline_basic_economy_not_modified(domain: "Domain", task) -> Optional[str]:
    """"Basic economy flights cannot be modified." (while "all reservations, including basic economy,
    can change cabin without changing the flights"): a gold `update_reservation_flights` of a
    basic economy reservation that changes its flights breaks it."""
    for a, db in before_each(domain, task, "update_reservation_flights"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        if res is None or res.cabin != "basic_economy":
            continue
        old = {(f.flight_number, f.date) for f in res.flights}
        new = {(f.get("flight_number"), f.get("date")) for f in a.arguments.get("flights") or []}
        if new != old:
            return _no(airline_basic_economy_not_modified,
                       f"reservation {res.reservation_id} is basic economy: its flights cannot be modified")
    return None


def airline_no_cabin_change_after_flown(domain: "Domain", task) -> Optional[str]:
    """"Cabin cannot be changed if any flight in the reservation has already been flown." (the
    cabin is one field of the reservation, so "cabin class must remain the same across all the
    flights" holds by construction): a gold `update_reservation_flights` with a new cabin on a
    reservation with a used segment breaks it."""
    for a, db in before_each(domain, task, "update_reservation_flights"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        if res is None or a.arguments.get("cabin") == res.cabin:
            continue
        seg = _used_segment(db, res)
        if seg is not None:
            return _no(airline_no_cabin_change_after_flown,
                       f"cannot change the cabin of reservation {res.reservation_id} from {res.cabin} to "
                       f"{a.arguments.get('cabin')}: segment {seg.flight_number} on {seg.date} has flown")
    return None


def airline_modify_keeps_origin_destination(domain: "Domain", task) -> Optional[str]:
    """"Other reservations can be modified without changing the origin, destination, and trip
    type.": the new flights of a gold `update_reservation_flights`, in time order, must leave from
    the reservation's origin; a one way trip must end at its destination, a round trip must reach
    its destination and end back at its origin."""
    for a, db in before_each(domain, task, "update_reservation_flights"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        legs = [(f.get("date"), db.flights.get(f.get("flight_number"))) for f in a.arguments.get("flights") or []]
        if res is None or not legs or any(flight is None for _, flight in legs):
            continue  # an unknown flight fails the call itself (gold_runs)
        legs.sort(key=lambda leg: (leg[0], leg[1].scheduled_departure_time_est))
        start, end = legs[0][1].origin, legs[-1][1].destination
        reached = [flight.destination for _, flight in legs]
        if res.flight_type == "one_way":
            ok = start == res.origin and end == res.destination
        else:
            ok = start == res.origin and end == res.origin and res.destination in reached
        if not ok:
            return _no(airline_modify_keeps_origin_destination,
                       f"new flights of reservation {res.reservation_id} go {' -> '.join([start, *reached])}, "
                       f"but the {res.flight_type} reservation is {res.origin} -> {res.destination}"
                       + (f" -> {res.origin}" if res.flight_type == "round_trip" else ""))
    return None


def airline_flight_change_paid_by_card(domain: "Domain", task) -> Optional[str]:
    """"If the flights are changed, the user needs to provide a single gift card or credit card for
    payment or refund method. The payment method must already be in user profile for safety
    reasons.": the `payment_id` of a gold `update_reservation_flights` must be a credit card or
    gift card of the reservation's user."""
    for a, db in before_each(domain, task, "update_reservation_flights"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        if res is None:
            continue
        pid = a.arguments.get("payment_id")
        source = _source(db.users.get(res.user_id), pid)
        if source not in ("credit_card", "gift_card"):
            return _no(airline_flight_change_paid_by_card,
                       f"flight change of reservation {res.reservation_id} paid with {pid!r}, which is "
                       + (f"a {source}" if source else f"not in the profile of {res.user_id}")
                       + ": it must be a credit card or gift card in the user's profile")
    return None


# -- passengers -----------------------------------------------------------------------------------
def airline_at_most_five_passengers(domain: "Domain", task) -> Optional[str]:
    """"Each reservation can have at most five passengers.": a gold `book_reservation` or
    `update_reservation_passengers` with more than five passengers breaks it."""
    for a in named(task, "book_reservation", "update_reservation_passengers"):
        n = len(a.arguments.get("passengers") or [])
        if n > 5:
            return _no(airline_at_most_five_passengers, f"{a.name} with {n} passengers (at most five)")
    return None


def airline_passenger_count_unchanged(domain: "Domain", task) -> Optional[str]:
    """"The user can modify passengers but cannot modify the number of passengers.": a gold
    `update_reservation_passengers` must give as many passengers as the reservation has."""
    for a, db in before_each(domain, task, "update_reservation_passengers"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        n = len(a.arguments.get("passengers") or [])
        if res is not None and n != len(res.passengers):
            return _no(airline_passenger_count_unchanged,
                       f"reservation {res.reservation_id} has {len(res.passengers)} passengers, the update gives {n}")
    return None


# -- baggage --------------------------------------------------------------------------------------
def airline_no_bag_removal(domain: "Domain", task) -> Optional[str]:
    """"The user can add but not remove checked bags.": a gold `update_reservation_baggages` may
    not lower the reservation's total (nor its paid) checked bags."""
    for a, db in before_each(domain, task, "update_reservation_baggages"):
        res = db.reservations.get(a.arguments.get("reservation_id"))
        if res is None:
            continue
        total, nonfree = a.arguments.get("total_baggages", 0), a.arguments.get("nonfree_baggages", 0)
        if total < res.total_baggages or nonfree < res.nonfree_baggages:
            return _no(airline_no_bag_removal,
                       f"reservation {res.reservation_id} has {res.total_baggages} bags ({res.nonfree_baggages} "
                       f"paid); the update gives {total} ({nonfree} paid): bags cannot be removed")
    return None


def airline_nonfree_bags_match_allowance(domain: "Domain", task) -> Optional[str]:
    """"Checked bag allowance: if the booking user is a regular member: 0 free checked bag for each
    basic economy passenger, 1 ... economy, 2 ... business; silver: 1, 2, 3; gold: 2, 3, 4. Each
    extra baggage is 50 dollars.": the paid bags of a gold `book_reservation` or
    `update_reservation_baggages` are the bags beyond the free allowance of the booking user's
    membership, the cabin and the passenger count, no more, no fewer."""
    for a, db in before_each(domain, task, "book_reservation", "update_reservation_baggages"):
        if a.name == "book_reservation":
            user, cabin = db.users.get(a.arguments.get("user_id")), a.arguments.get("cabin")
            passengers, what = len(a.arguments.get("passengers") or []), "the new reservation"
        else:
            res = db.reservations.get(a.arguments.get("reservation_id"))
            if res is None:
                continue
            user, cabin, passengers = db.users.get(res.user_id), res.cabin, len(res.passengers)
            what = f"reservation {res.reservation_id}"
        if user is None:
            continue
        free = _free_bags(user.membership, cabin, passengers)
        total, nonfree = a.arguments.get("total_baggages", 0), a.arguments.get("nonfree_baggages", 0)
        if nonfree != max(0, total - free):
            return _no(airline_nonfree_bags_match_allowance,
                       f"{what}: {total} bags with {free} free ({user.membership} member, {cabin}, {passengers} "
                       f"passengers) means {max(0, total - free)} paid, not {nonfree}")
    return None


# -- payment --------------------------------------------------------------------------------------
def airline_booking_payment_limits(domain: "Domain", task) -> Optional[str]:
    """"Each reservation can use at most one travel certificate, at most one credit card, and at
    most three gift cards.": counted over the payment methods of a gold `book_reservation`."""
    for a, db in before_each(domain, task, "book_reservation"):
        user = db.users.get(a.arguments.get("user_id"))
        counts: dict[str, int] = {}
        for p in a.arguments.get("payment_methods") or []:
            pid = p.get("payment_id", "")
            source = _source(user, pid) or pid.rsplit("_", 1)[0]
            counts[source] = counts.get(source, 0) + 1
        over = [f"{n} {s.replace('_', ' ')}s" for s, n in counts.items() if n > MAX_PAYMENTS.get(s, n)]
        if over:
            return _no(airline_booking_payment_limits,
                       f"booking pays with {', '.join(over)} "
                       "(at most one certificate, one credit card, three gift cards)")
    return None


def airline_payment_in_profile(domain: "Domain", task) -> Optional[str]:
    """"All payment methods must already be in user profile for safety reasons.": every payment
    method of a gold `book_reservation`, `update_reservation_flights` or
    `update_reservation_baggages` is one of the (booking) user's."""
    for a, db in before_each(domain, task, "book_reservation", "update_reservation_flights",
                             "update_reservation_baggages"):
        if a.name == "book_reservation":
            user_id = a.arguments.get("user_id")
            pids = [p.get("payment_id") for p in a.arguments.get("payment_methods") or []]
        else:
            res = db.reservations.get(a.arguments.get("reservation_id"))
            if res is None:
                continue
            user_id, pids = res.user_id, [a.arguments.get("payment_id")]
        user = db.users.get(user_id)
        if user is None:
            continue
        missing = [pid for pid in pids if pid not in user.payment_methods]
        if missing:
            return _no(airline_payment_in_profile,
                       f"{a.name} pays with {', '.join(map(repr, missing))}, not in the profile of {user_id}")
    return None


# -- compensation ---------------------------------------------------------------------------------
def airline_certificate_eligibility(domain: "Domain", task) -> Optional[str]:
    """"Do not compensate if the user is regular member and has no travel insurance and flies
    (basic) economy. ... Only compensate if the user is a silver/gold member or has travel
    insurance or flies business.": a gold `send_certificate` names the user, not the reservation
    complained about, so the rule refuses it only for a regular member none of whose reservations
    has travel insurance or flies business."""
    for a, db in before_each(domain, task, "send_certificate"):
        user = db.users.get(a.arguments.get("user_id"))
        if user is None or user.membership in ("silver", "gold"):
            continue
        mine = [r for rid in user.reservations if (r := db.reservations.get(rid)) is not None]
        if not any(r.insurance == "yes" or r.cabin == "business" for r in mine):
            return _no(airline_certificate_eligibility,
                       f"{user.user_id} is a regular member with no insured or business reservation: no compensation")
    return None


def airline_certificate_amount(domain: "Domain", task) -> Optional[str]:
    """"If the user complains about cancelled flights in a reservation, ... a certificate ... with
    the amount being $100 times the number of passengers. If the user complains about delayed
    flights ... $50 times the number of passengers.": the amount of a gold `send_certificate` is
    $100 or $50 times the passenger count of one of the user's reservations."""
    for a, db in before_each(domain, task, "send_certificate"):
        user = db.users.get(a.arguments.get("user_id"))
        if user is None:
            continue
        counts = {len(r.passengers) for rid in user.reservations if (r := db.reservations.get(rid)) is not None}
        allowed = {per * n for n in counts for per in (50, 100)}
        if a.arguments.get("amount") not in allowed:
            return _no(airline_certificate_amount,
                       f"certificate of {a.arguments.get('amount')} for {user.user_id}: not $100 or $50 times the "
                       f"passengers of a reservation of theirs ({sorted(allowed)})")
    return None


RULES = (
    airline_no_cancel_after_flown,
    airline_cancellation_eligibility,
    airline_basic_economy_not_modified,
    airline_no_cabin_change_after_flown,
    airline_modify_keeps_origin_destination,
    airline_flight_change_paid_by_card,
    airline_at_most_five_passengers,
    airline_passenger_count_unchanged,
    airline_no_bag_removal,
    airline_nonfree_bags_match_allowance,
    airline_booking_payment_limits,
    airline_payment_in_profile,
    airline_certificate_eligibility,
    airline_certificate_amount,
)
