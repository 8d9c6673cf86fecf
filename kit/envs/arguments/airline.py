"""Airline write calls drawn from the flight database under tau2's airline policy.

Every candidate names real records (a user, one of their reservations, their payment methods,
flights on dates that are still available with enough seats) and is one the policy allows:

  cancel_reservation             a reservation not cancelled, none of whose segments has flown, that
                                 is business, was booked within 24 hours, or has a flight the airline
                                 cancelled (the insurance case needs the user's reason: not drawn).
  send_certificate               $100 x passengers for a reservation with a cancelled flight, for a
                                 silver/gold member or an insured or business reservation (the
                                 delayed-flight case goes with a change or cancellation: not drawn).
  update_reservation_baggages    1 to 3 more bags, paid bags as the allowance computes them, paid by
                                 a credit card or a gift card whose balance covers the fee.
  update_reservation_passengers  one passenger replaced by a saved passenger of the user (or the user),
                                 the count unchanged.
  update_reservation_flights     a cabin change keeping the flights (every flight still available),
                                 or, for a non basic economy reservation, one segment moved to another
                                 direct flight of the same route on the same date that fits the
                                 connections; no segment flown; price difference paid by a credit
                                 card or a gift card that covers it.
  book_reservation               a one way or round trip on direct flights available on their dates,
                                 1 to 3 passengers (the user and their saved passengers), bags and paid
                                 bags by the allowance, one payment method that covers the total.
"""

from __future__ import annotations

import random
from typing import Any, Optional

from kit.envs.arguments import WriteCandidate, draw
from kit.envs.rules.airline import DAY_BEFORE, FREE_BAGS, USED

CABINS = ("basic_economy", "economy", "business")


# -- reading the database -------------------------------------------------------------------------
def _day(db: Any, flight_number: str, date: str) -> Any:
    flight = db.flights.get(flight_number)
    return flight.dates.get(date) if flight is not None else None


def _status(db: Any, seg: Any) -> Optional[str]:
    return getattr(_day(db, seg.flight_number, seg.date), "status", None)


def _seats(day: Any, cabin: str, n: int) -> bool:
    """Whether the flight on that day is bookable in `cabin` for `n` passengers."""
    return getattr(day, "status", None) == "available" and day.available_seats.get(cabin, 0) >= n


def _open(db: Any, res: Any) -> bool:
    """A reservation that is not cancelled and none of whose segments has flown."""
    return res.status != "cancelled" and not any(_status(db, s) in USED for s in res.flights)


def _payers(user: Any, cost: float) -> list[str]:
    """The user's credit cards, and gift cards whose balance covers `cost` (what an update takes)."""
    return [pid for pid, m in user.payment_methods.items()
            if m.source == "credit_card" or (m.source == "gift_card" and m.amount >= cost)]


def _reservations(db: Any, fixed: Optional[dict]) -> list:
    fixed = fixed or {}
    if "reservation_id" in fixed:
        res = db.reservations.get(fixed["reservation_id"])
        return [res] if res is not None else []
    if "user_id" in fixed:
        user = db.users.get(fixed["user_id"])
        return [r for rid in (user.reservations if user else []) if (r := db.reservations.get(rid)) is not None]
    return list(db.reservations.values())


def _knows(res: Any) -> dict:
    return {"user_id": res.user_id, "reservation_id": res.reservation_id}


def _what(res: Any) -> str:
    return (f"reservation {res.reservation_id} ({res.origin}->{res.destination} {res.flight_type.replace('_', ' ')}, "
            f"{res.cabin}, {_count(len(res.passengers), 'passenger')})")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _person(p: Any) -> dict:
    return {"first_name": p.first_name, "last_name": p.last_name, "dob": p.dob}


def _minutes(clock: str) -> int:
    """'HH:MM:SS' (or 'HH:MM:SS+1', the next day) as minutes from the day's start."""
    hh, mm = clock[:5].split(":")
    return int(hh) * 60 + int(mm) + (1440 if "+1" in clock else 0)


# -- generators -----------------------------------------------------------------------------------
def cancel_reservation(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(res, _rng):
        if not _open(db, res):
            return []
        why = ("business" if res.cabin == "business" else "booked within 24 hours" if res.created_at >= DAY_BEFORE
               else "flight cancelled by the airline" if any(_status(db, s) == "cancelled" for s in res.flights)
               else None)
        if why is None:
            return []
        return [WriteCandidate({"reservation_id": res.reservation_id}, _knows(res),
                               f"cancel {_what(res)}, booked {res.created_at[:10]}: {why}")]
    return draw(_reservations(db, fixed), rng, limit, fixed, options)


def send_certificate(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(res, _rng):
        user = db.users.get(res.user_id)
        cancelled = [s for s in res.flights if _status(db, s) == "cancelled"]
        if user is None or not cancelled:
            return []
        if user.membership == "regular" and res.insurance != "yes" and res.cabin != "business":
            return []
        amount = 100 * len(res.passengers)
        return [WriteCandidate({"user_id": user.user_id, "amount": amount}, _knows(res),
                               f"certificate of ${amount} to {user.user_id} ({user.membership} member, insurance {res.insurance}): flight "
                               f"{cancelled[0].flight_number} on {cancelled[0].date} of {_what(res)} was cancelled")]
    return draw(_reservations(db, fixed), rng, limit, fixed, options)


def update_reservation_baggages(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(res, _rng):
        user = db.users.get(res.user_id)
        if user is None or not _open(db, res):
            return []
        free = FREE_BAGS.get(user.membership, {}).get(res.cabin, 0) * len(res.passengers)
        out = []
        for add in (1, 2, 3):
            total = res.total_baggages + add
            nonfree = max(0, total - free)
            if nonfree < res.nonfree_baggages:
                continue  # the db's paid bags exceed the allowance's: adding bags cannot keep both rules
            fee = 50 * (nonfree - res.nonfree_baggages)
            for pid in _payers(user, fee):
                out.append(WriteCandidate(
                    {"reservation_id": res.reservation_id, "total_baggages": total, "nonfree_baggages": nonfree,
                     "payment_id": pid}, _knows(res),
                    f"{_what(res)}: {res.total_baggages} -> {total} checked bags ({free} free for a "
                    f"{user.membership} member, {nonfree} paid, ${fee} with {pid})"))
        return out
    return draw(_reservations(db, fixed), rng, limit, fixed, options)


def update_reservation_passengers(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    def options(res, _rng):
        user = db.users.get(res.user_id)
        if user is None or res.status == "cancelled":
            return []
        current = [_person(p) for p in res.passengers]
        self_ = {"first_name": user.name.first_name, "last_name": user.name.last_name, "dob": user.dob}
        pool = [p for p in [*map(_person, user.saved_passengers), self_] if p not in current]
        out = []
        for new in pool:
            for i, old in enumerate(current):
                people = [*current[:i], new, *current[i + 1:]]
                out.append(WriteCandidate(
                    {"reservation_id": res.reservation_id, "passengers": people}, _knows(res),
                    f"{_what(res)}: replace passenger {old['first_name']} {old['last_name']} with "
                    f"{new['first_name']} {new['last_name']} (born {new['dob']})"))
        return out
    return draw(_reservations(db, fixed), rng, limit, fixed, options)


def update_reservation_flights(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    routes: dict[tuple[str, str], list] = {}
    for flight in db.flights.values():
        routes.setdefault((flight.origin, flight.destination), []).append(flight)

    def changes(res):
        """(cabin, flights, price difference, what) for each allowed change of the reservation."""
        n, old = len(res.passengers), [(s.flight_number, s.date) for s in res.flights]
        paid = sum(s.price for s in res.flights) * n
        for cabin in CABINS:  # a cabin change keeps the flights, priced anew
            days = [_day(db, s.flight_number, s.date) for s in res.flights]
            if cabin != res.cabin and all(_seats(d, cabin, n) for d in days):
                yield cabin, old, sum(d.prices[cabin] for d in days) * n - paid, f"cabin {res.cabin} -> {cabin}"
        if res.cabin == "basic_economy":
            return  # "Basic economy flights cannot be modified."
        for j, seg in enumerate(res.flights):
            mine = db.flights[seg.flight_number]
            before = res.flights[j - 1] if j > 0 and res.flights[j - 1].date == seg.date else None
            after = res.flights[j + 1] if j + 1 < len(res.flights) and res.flights[j + 1].date == seg.date else None
            for alt in routes.get((mine.origin, mine.destination), []):
                day = alt.dates.get(seg.date)
                if alt.flight_number == seg.flight_number or not _seats(day, res.cabin, n):
                    continue
                if before and _minutes(alt.scheduled_departure_time_est) < _minutes(
                        db.flights[before.flight_number].scheduled_arrival_time_est):
                    continue
                if after and _minutes(alt.scheduled_arrival_time_est) > _minutes(
                        db.flights[after.flight_number].scheduled_departure_time_est):
                    continue
                flights = [*old[:j], (alt.flight_number, seg.date), *old[j + 1:]]
                yield res.cabin, flights, (day.prices[res.cabin] - seg.price) * n, (
                    f"flight {seg.flight_number} -> {alt.flight_number} on {seg.date}")

    def options(res, _rng):
        user = db.users.get(res.user_id)
        if user is None or not _open(db, res) or any(s.flight_number not in db.flights for s in res.flights):
            return []
        return [WriteCandidate(
            {"reservation_id": res.reservation_id, "cabin": cabin,
             "flights": [{"flight_number": f, "date": d} for f, d in flights], "payment_id": pid}, _knows(res),
            f"{_what(res)}: {what}, {'pay' if diff >= 0 else 'refund'} ${abs(diff)} with {pid}")
            for cabin, flights, diff, what in changes(res) for pid in _payers(user, diff)]
    return draw(_reservations(db, fixed), rng, limit, fixed, options)


def book_reservation(db, rng: random.Random, limit: int, fixed: Optional[dict]) -> list[WriteCandidate]:
    fixed = fixed or {}
    users = [db.users[fixed["user_id"]]] if fixed.get("user_id") in db.users else (
        [] if "user_id" in fixed else list(db.users.values()))
    flights = list(db.flights.values())
    back_of: dict[tuple[str, str], list] = {}
    for flight in flights:
        back_of.setdefault((flight.destination, flight.origin), []).append(flight)

    def options(user, rng_):
        people = [{"first_name": user.name.first_name, "last_name": user.name.last_name, "dob": user.dob},
                  *(_person(p) for p in user.saved_passengers)][:3]
        n = rng_.randint(1, len(people))
        out_flight = rng_.choice(flights)
        days = sorted(out_flight.dates.items())
        rng_.shuffle(days)  # any date still open, not always the first
        for date, day in days:
            cabin = rng_.choice(CABINS)
            if not _seats(day, cabin, n):
                continue
            legs = [(out_flight, date, day)]
            returns = [(f, d, x) for f in back_of.get((out_flight.origin, out_flight.destination), [])
                       for d, x in sorted(f.dates.items()) if d > date and _seats(x, cabin, n)]
            if returns and rng_.random() < 0.5:
                legs.append(rng_.choice(returns))
            break
        else:
            return []
        free = FREE_BAGS.get(user.membership, {}).get(cabin, 0) * n
        total = rng_.randint(0, free + 1)
        nonfree, insurance = max(0, total - free), rng_.choice(("yes", "no"))
        price = sum(x.prices[cabin] for _, _, x in legs) * n + (30 * n if insurance == "yes" else 0) + 50 * nonfree
        kind = "round_trip" if len(legs) == 2 else "one_way"
        pays = [pid for pid, m in user.payment_methods.items() if m.source == "credit_card" or m.amount >= price]
        trip = ", ".join(f"{f.flight_number} {f.origin}->{f.destination} {d}" for f, d, _ in legs)
        return [WriteCandidate(
            {"user_id": user.user_id, "origin": out_flight.origin, "destination": out_flight.destination,
             "flight_type": kind, "cabin": cabin, "flights": [{"flight_number": f.flight_number, "date": d}
                                                              for f, d, _ in legs],
             "passengers": people[:n], "payment_methods": [{"payment_id": pid, "amount": price}],
             "total_baggages": total, "nonfree_baggages": nonfree, "insurance": insurance},
            {"user_id": user.user_id},
            f"book {kind.replace('_', ' ')} {trip} in {cabin} for {', '.join(p['first_name'] for p in people[:n])}; "
            f"{total} bags ({nonfree} paid), insurance {insurance}; ${price} with {pid}") for pid in pays]
    return draw(users, rng, limit, fixed, options)


GENERATORS = {
    "book_reservation": book_reservation,
    "cancel_reservation": cancel_reservation,
    "send_certificate": send_certificate,
    "update_reservation_baggages": update_reservation_baggages,
    "update_reservation_flights": update_reservation_flights,
    "update_reservation_passengers": update_reservation_passengers,
}
