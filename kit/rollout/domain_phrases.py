"""How a customer of τ²'s airline, retail and telecom domains asks for each write, in words.

The phrasing bank (phrasing.py) has its own wordings for mock's two tools; for any other tool it
falls back to the tool's name ("update the reservation baggages with reservation id EB17TJ, total
baggages 2 and nonfree baggages 0"). Here each write tool of the three domains has a few verb
phrases in the second person that name the values the customer states ("change the checked bags
on your reservation EB17TJ to 2 in total, 0 of them paid"), followed by the customer's words for the
values the agent looks up (Step.described: "paying with your gift card").

A phrase is used only if every value it must state appears in it (`render` checks each leaf):
a template that drops a value would make the task ungrounded, so it falls back instead.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


def _passengers(people: Any) -> str:
    rows = people if isinstance(people, list) else [people]
    names = [f"{p.get('first_name', '')} {p.get('last_name', '')} (born {p.get('dob', '')})".strip()
             for p in rows if isinstance(p, dict)]
    return " and ".join(names)


def _word(value: Any) -> str:
    """An enumeration value as a customer says it: 'basic_economy' -> 'basic economy', 'round_trip' ->
    'round trip' (grounding reads underscores as spaces, so the value still counts as stated)."""
    return str(value).replace("_", " ")


def _flights(flights: Any) -> str:
    rows = flights if isinstance(flights, list) else [flights]
    return " and ".join(f"flight {f.get('flight_number')} on {f.get('date')}" for f in rows if isinstance(f, dict))


def _address(s: dict) -> str:
    parts = [s.get("address1"), s.get("address2"), s.get("city"), s.get("state"), s.get("zip"), s.get("country")]
    return ", ".join(str(p) for p in parts if p)


def _bags(s: dict) -> str:
    total = s["total_baggages"]
    return f"{total} checked bag{'' if total == 1 else 's'} in total, {s['nonfree_baggages']} of them paid"


# tool -> [(the arguments the phrase states, phrase(stated) -> text)]: the first whose arguments are
# exactly the step's stated ones is drawn from (a customer who withholds a value gets another phrasing)
PHRASES: dict[str, list[tuple[frozenset, list[Callable[[dict], str]]]]] = {
    # airline
    "cancel_reservation": [(frozenset({"reservation_id"}), [
        lambda s: f"cancel your reservation {s['reservation_id']}",
        lambda s: f"cancel the booking {s['reservation_id']}",
        lambda s: f"call off your trip on reservation {s['reservation_id']}"])],
    "update_reservation_baggages": [(frozenset({"reservation_id", "total_baggages", "nonfree_baggages"}), [
        lambda s: f"change the bags on your reservation {s['reservation_id']} to {_bags(s)}",
        lambda s: f"have reservation {s['reservation_id']} carry {_bags(s)}",
        lambda s: f"add checked luggage to reservation {s['reservation_id']}: {_bags(s)}"]),
                                    # the reservation a booking earlier in the request made (a chained task)
                                    (frozenset({"total_baggages", "nonfree_baggages"}), [
        lambda s: f"change the bags on that new booking to {_bags(s)}",
        lambda s: f"have the new reservation carry {_bags(s)}"])],
    "book_reservation": [(frozenset({"origin", "destination", "flight_type", "cabin", "flights", "passengers",
                                     "total_baggages", "nonfree_baggages", "insurance"}), [
        lambda s: f"book a {_word(s['flight_type'])} from {s['origin']} to {s['destination']} on {_flights(s['flights'])}, "
                  f"in {_word(s['cabin'])}, for {_passengers(s['passengers'])}, with {_bags(s)}, travel insurance: {s['insurance']}",
        lambda s: f"fly {_word(s['flight_type'])} {s['origin']} to {s['destination']} ({_word(s['cabin'])}) on {_flights(s['flights'])}: "
                  f"a booking for {_passengers(s['passengers'])}, {_bags(s)}, insurance {s['insurance']}",
        lambda s: f"make a new {_word(s['flight_type'])} reservation, {s['origin']} to {s['destination']}, on "
                  f"{_flights(s['flights'])} in {_word(s['cabin'])} for {_passengers(s['passengers'])}; "
                  f"{_bags(s)}; insurance {s['insurance']}"])],
    "update_reservation_passengers": [(frozenset({"reservation_id", "passengers"}), [
        lambda s: f"change the passenger details on reservation {s['reservation_id']} to {_passengers(s['passengers'])}",
        lambda s: f"fix the traveller names on booking {s['reservation_id']}: {_passengers(s['passengers'])}",
        lambda s: f"have {_passengers(s['passengers'])} as the passengers of reservation {s['reservation_id']}"]),
                                      (frozenset({"passengers"}), [
        lambda s: f"change the passengers of the new booking to {_passengers(s['passengers'])}",
        lambda s: f"have {_passengers(s['passengers'])} as the travellers on that new reservation"])],
    "update_reservation_flights": [(frozenset({"reservation_id", "cabin", "flights"}), [
        lambda s: f"move your reservation {s['reservation_id']} to {_flights(s['flights'])}, in {_word(s['cabin'])}",
        lambda s: f"change the flights of booking {s['reservation_id']} to {_flights(s['flights'])} ({_word(s['cabin'])} cabin)",
        lambda s: f"rebook reservation {s['reservation_id']} on {_flights(s['flights'])}, {_word(s['cabin'])} class"]),
                                   (frozenset({"cabin", "flights"}), [
        lambda s: f"change the new booking to {_flights(s['flights'])} in {_word(s['cabin'])}",
        lambda s: f"move that new reservation to {_word(s['cabin'])} on {_flights(s['flights'])}"])],
    "send_certificate": [(frozenset({"amount"}), [  # the user id: said beside it, as the customer's own id
        lambda s: f"get the ${s['amount']} certificate you were promised",
        lambda s: f"receive a travel certificate of ${s['amount']}"])],
    # retail
    "cancel_pending_order": [(frozenset({"order_id", "reason"}), [
        lambda s: f"cancel your order {s['order_id']}: it was {s['reason']}",
        lambda s: f"cancel the pending order {s['order_id']} (reason: {s['reason']})",
        lambda s: f"call off order {s['order_id']}, because it was {s['reason']}"])],
    "modify_pending_order_address": [(frozenset({"order_id", "address1", "address2", "city", "state", "country", "zip"}), [
        lambda s: f"ship your order {s['order_id']} to {_address(s)} instead",
        lambda s: f"change the delivery address of order {s['order_id']} to {_address(s)}",
        lambda s: f"have order {s['order_id']} sent to {_address(s)}"])],
    "modify_user_address": [(frozenset({"address1", "address2", "city", "state", "country", "zip"}), [
        lambda s: f"change your default address to {_address(s)}",
        lambda s: f"update the address on file to {_address(s)}"])],
    "modify_pending_order_payment": [(frozenset({"order_id"}), [
        lambda s: f"change how you pay for your order {s['order_id']}",
        lambda s: f"switch the payment of pending order {s['order_id']}"])],
    "modify_pending_order_items": [(frozenset({"order_id"}), [
        lambda s: f"change an item in your pending order {s['order_id']}",
        lambda s: f"modify your order {s['order_id']} before it ships"])],
    "exchange_delivered_order_items": [(frozenset({"order_id"}), [
        lambda s: f"exchange items from your delivered order {s['order_id']}",
        lambda s: f"swap something you received in order {s['order_id']}"])],
    "return_delivered_order_items": [(frozenset({"order_id"}), [
        lambda s: f"return items from your order {s['order_id']}",
        lambda s: f"send back part of your delivered order {s['order_id']}"])],
    # telecom (the line or account is named by its phone number in the described words)
    "suspend_line": [(frozenset({"reason"}), [
        lambda s: f"suspend a line ({s['reason']})",
        lambda s: f"put a line on hold: {s['reason']}"])],
    "resume_line": [(frozenset(), [lambda s: "resume a suspended line", lambda s: "get a suspended line working again"])],
    "send_payment_request": [(frozenset(), [lambda s: "get a payment request for a bill",
                                            lambda s: "be sent a request to pay a bill"])],
    "enable_roaming": [(frozenset(), [lambda s: "turn on roaming", lambda s: "enable roaming before a trip abroad"])],
    "disable_roaming": [(frozenset(), [lambda s: "turn off roaming", lambda s: "disable roaming now that you are home"])],
    "refuel_data": [(frozenset({"gb_amount"}), [
        lambda s: f"add {s['gb_amount']} GB of data", lambda s: f"buy a {s['gb_amount']} GB data top-up"])],
}


def render(tool: str, stated: dict, pick: Callable[[list], Any]) -> Optional[str]:
    """A verb phrase for `tool` stating every value of `stated` (owner ids excluded by the caller), or None
    when the tool has no phrase for these arguments or a drawn phrase would leave a value unsaid."""
    from kit.grounding import contains, norm  # the grounding check's own matching (underscores read as spaces)
    from kit.rollout.request import _leaves  # every scalar of a value, as text

    for keys, options in PHRASES.get(tool, []):
        if keys != frozenset(stated):
            continue
        text = pick(options)(stated)
        said = norm(text)
        if all(contains(said, leaf) for v in stated.values() for leaf in _leaves(v, set())):
            return text
    return None


# ----- telecom's device steps: what the agent asks the customer to do on their phone ---------------
# tool -> options of the agent's words (the arguments given): a read asks the customer to look and say what the
# phone shows; a write names the change (the cause, which the customer's last report showed, then the step).
# Values a call needs are in the words (set_network_mode_preference's mode), so the user's call is grounded.
DEVICE_STEPS: dict[str, list[Callable[[dict], str]]] = {
    "check_status_bar": [lambda a: "Could you look at the status bar at the top of your phone's screen and tell me "
                                   "what it shows?",
                         lambda a: "What icons do you see in the status bar at the top of your phone?"],
    "check_network_status": [lambda a: "Could you check your phone's network status and tell me what it shows?",
                             lambda a: "Please open your phone's network settings and read me what they say."],
    "check_sim_status": [lambda a: "Could you check the status of the SIM card in your phone and tell me what it "
                                   "says?"],
    "check_data_restriction_status": [lambda a: "Could you check whether any data-limiting setting, such as Data "
                                                "Saver, is on in your phone?"],
    "check_network_mode_preference": [lambda a: "Could you check which network mode your phone is set to prefer?"],
    "run_speed_test": [lambda a: "Please run a speed test on your phone and tell me the result."],
    "toggle_airplane_mode": [lambda a: "Airplane mode is on, and it blocks every connection. Please turn airplane "
                                       "mode off.",
                             lambda a: "That plane icon means airplane mode is on. Please switch airplane mode off."],
    "reseat_sim_card": [lambda a: "Your phone does not detect its SIM card. Please take the SIM card out and put it "
                                  "back in firmly.",
                        lambda a: "The SIM card is not being read. Please remove the SIM card and reinsert it."],
    "toggle_data": [lambda a: "Mobile data is switched off on your phone. Please turn mobile data on.",
                    lambda a: "Your mobile data setting is off. Please switch mobile data back on."],
    "toggle_roaming": [lambda a: "Data roaming is off on your phone, and abroad you need it. Please turn data "
                                 "roaming on.",
                       lambda a: "Your phone has data roaming switched off. Please switch data roaming on."],
    "toggle_data_saver_mode": [lambda a: "Data Saver is on, and it slows your connection down. Please turn Data "
                                         "Saver off."],
    "set_network_mode_preference": [lambda a: "Your phone is set to an old, slow network type. Please set the "
                                              f"preferred network mode to {a.get('mode')}."],
    "reboot_device": [lambda a: "Please restart your phone."],
    "make_payment": [lambda a: "Please pay the payment request I have just sent you."],
}


def device_ask(tool: str, arguments: dict, pick: Callable[[list], Any]) -> str:
    """The agent's words asking the customer to run `tool` (a user tool) on their phone."""
    options = DEVICE_STEPS.get(tool)
    if options:
        return pick(options)(arguments)
    args = "".join(f", with {k.replace('_', ' ')} {v}" for k, v in arguments.items())
    return f"Please {tool.replace('_', ' ')} on your phone{args}."


def device_report(result: str, read: bool) -> str:
    """The customer's words after running a tool on their phone: what the phone showed, as it showed it."""
    shown = " ".join((result or "").split())
    return (f"Here is what my phone shows: {shown}" if read else f"Okay, I did that. My phone now says: {shown}")
