"""The phrasing bank (kit/rollout/phrasing.py): every wording carries its values and passes the grounding
check and the fidelity gate; choices are reproducible; lookup and facts-on-request tasks the engine makes
have grounded gold dialogues that replay to reward 1; task tags survive the task files."""

import json
import re

import pytest

from kit.bench.openings import mask, opening_variety
from kit.engine.choice import Chooser
from kit.engine.plans import EDGES, PERSONAS, PlanPair, Slice, lookup_param, tool_patterns
from kit.engine.prompts import Prompts
from kit.engine.synthesize import Synthesizer
from kit.engine.validate import executable_checks
from kit.envs import load_domain
from kit.grounding import agent_turn_problems, contains, norm, text_problems, user_turn_problems
from kit.llm.types import Backend, Completion
from kit.replay import gold_trajectory
from kit.rollout import min_episode_steps
from kit.rollout import phrasing as P
from kit.rollout.fidelity import claims_done
from kit.rollout.request import Request, Step, first_person, scenario_opening, task_request
from kit.rollout.views import agent_view
from kit.tags import PHRASINGS, tagged_notes, task_tags
from kit.verify import tau2_verdict, verify

from tau2.data_model.tasks import Task

SYSTEM = "You are a customer service agent."
_YOU = re.compile(r"\b(you|your|yours|you're)\b", re.I)
TITLES = ["Pay electricity bill", "Book dentist appointment", "Water the plants", "Q3 budget review"]


def _requests(i: int) -> list[tuple[Request, dict, dict]]:
    """(request, labels, the gold writes' arguments) of every kind the engine makes, with values from task i."""
    uid, tid, title, desc = f"user_{100 + i}", f"tsk_{300 + i}", TITLES[i % len(TITLES)], f"Before Friday {i}"
    labels = {tid: TITLES[(i + 1) % len(TITLES)]}
    out = [
        (Request(f"c{i}", [Step("create_task", {"user_id": uid, "title": title})]), {}, [{"user_id": uid, "title": title}]),
        (Request(f"d{i}", [Step("create_task", {"user_id": uid, "title": title, "description": desc})]), {},
         [{"user_id": uid, "title": title, "description": desc}]),
        (Request(f"u{i}", [Step("update_task_status", {"task_id": tid, "status": "completed"})]), labels,
         [{"task_id": tid, "status": "completed"}]),
        (Request(f"p{i}", [Step("update_task_status", {"task_id": tid, "status": "pending"})]), labels,
         [{"task_id": tid, "status": "pending"}]),
        (Request(f"m{i}", [Step("create_task", {"user_id": uid, "title": title}),
                           Step("update_task_status", {"status": "completed"}, ["task_id"])]), {},
         [{"user_id": uid, "title": title}, {"task_id": "task_9", "status": "completed"}]),
        (Request(f"n{i}", [Step("update_task_status", {"task_id": tid, "status": "pending"}),
                           Step("create_task", {"user_id": uid, "title": title})]), labels,
         [{"task_id": tid, "status": "pending"}, {"user_id": uid, "title": title}]),
        (Request(f"l{i}", [Step("create_task", {"title": title}, ["user_id"])], identity={"name": "Maya Okafor"}), {},
         [{"user_id": uid, "title": title}]),
    ]
    return out


def _said(text: P.ScenarioText) -> str:
    return " ".join(first_person(x) for x in ((text.reason_for_call,) if text.ask_for else
                                              (text.reason_for_call, text.known_info)) if x)


@pytest.mark.parametrize("ask_for_id", [False, True])
def test_every_sampled_phrasing_carries_its_values_and_passes_grounding_and_the_gate(ask_for_id):
    families = set()
    for i in range(60):
        for req, labels, writes in _requests(i):
            text = P.scenario_text(req, seed="scenario", labels=labels, ask_for_id=ask_for_id)
            families.add(text.phrasing)
            withheld = {str(s.stated[k]) for s in req.steps for k in text.ask_for if k in s.stated} | \
                {str(req.identity[k]) for k in text.ask_for if k in req.identity}  # who they are, when they have no id
            scenario = f"{text.reason_for_call} {text.known_info or ''} {text.task_instructions}"
            known_text = " ".join(str(v) for v in req.values()) + " " + " ".join(labels.values()) + " " + req.text()
            # the fidelity gate the synthesizer applies to model prose passes the bank's own fields
            assert text_problems(text.reason_for_call, (), known_text, second_person=True) == [], text
            rest = [v for v in req.values() if not contains(norm(text.reason_for_call), v)]
            if text.known_info:
                assert text_problems(text.known_info, rest, known_text, second_person=True) == [], text
            else:
                assert rest == [], text
            # the opening says every value but the withheld ones, in the first person; they wait in the known info
            opening = P.dress(_said(text), "gold", key=req.task_id)
            assert not _YOU.search(_said(text)), _said(text)
            for v in req.values():
                assert contains(norm(opening), v) == (str(v) not in withheld), (v, opening)
            assert all(contains(norm(text.known_info), v) for v in withheld)
            assert bool(text.ask_for) == (ask_for_id and (any(k == "user_id" for s in req.steps for k in s.stated)
                                                          or bool(req.identity)))
            # the user's turns keep to the scenario; the gold calls are grounded in the dialogue
            view = [{"role": "system", "content": scenario}, {"role": "user", "content": "Hi! How can I help you today?"}]
            assert user_turn_problems(view + [{"role": "assistant", "content": opening}]) == [], opening
            dialogue = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": opening}]
            if text.ask_for:
                answer = P.answer_line(first_person(text.known_info), "gold", key=req.task_id)
                dialogue += [{"role": "assistant", "content": P.ask_line(text.ask_for, "gold", key=req.task_id)},
                             {"role": "user", "content": answer}]
            if req.identity or req.steps[-1].from_results:  # ids the agent learns from a tool result
                dialogue.append({"role": "tool", "content": json.dumps({"user_id": writes[0]["user_id"], "task_id": "task_9"})})
            for args in writes:
                call = {"id": "c", "type": "function", "function": {"name": "x", "arguments": json.dumps(args)}}
                assert agent_turn_problems(dialogue + [{"role": "assistant", "content": "", "tool_calls": [call]}]) == [], \
                    (dialogue, args)
    assert families == set(PHRASINGS)


def test_every_entry_of_the_bank_says_its_value_and_reads_in_the_first_person():
    """Each wording list, entry by entry (sampling may miss one): formatted with a value, it names the
    value, and said back by the customer it has no second-person word left."""
    v, q = "user_7", "'Pay rent'"
    filled = []
    for tm in P.TITLE_MODS:
        filled += [vp.format(tm=tm.format(q=q), tq=q) for vp in P.CREATE_VPS]
    for vps, s in ((P.DONE_VPS, "completed"), (P.REOPEN_VPS, "pending"), (P.STATUS_VPS, "archived")):
        for ref in P.RECORD_REFS + P.LABELLED_REFS:
            filled += [vp.format(t=ref.format(v="tsk_4", l=q), s=s) for vp in vps]
    filled += [x.format(v=v) for x in P.OWNER_INLINE + P.OWNER_FACTS + P.NAME_INLINE + P.NAME_FACTS + P.EMAIL_FACTS]
    filled += [x.format(q=q, b="Pay rent") for x in P.DESC_INLINE + P.DESC_FACTS]
    filled += [x.format(tq=q) for x in P.CREATE_CONTEXTS]
    filled += [x.format(l=q, L=q) for x in P.DONE_CONTEXTS + P.REOPEN_CONTEXTS]
    filled += [x.format(vp="mark tsk_4 as completed") for x in P.TEMPLATE_FRAMES + P.GOAL_FRAMES]
    for text in filled:
        said = first_person(text)
        assert not _YOU.search(said), said
        assert any(contains(norm(said), x) for x in ("user_7", "Pay rent", "tsk_4", "completed", "pending", "archived")) \
            or text in [x.format(tq=q) for x in P.CREATE_CONTEXTS], text
    for frame in P.TEMPLATE_FRAMES + P.GOAL_FRAMES:
        assert text_problems(frame.format(vp="mark tsk_4 as completed"), ["tsk_4", "completed"], "tsk_4",
                             second_person=True) == [], frame
    for line in P.GREETINGS + P.LEAD_INS + P.SIGN_OFFS + P.ANSWER_LEAD:
        assert not _YOU.search(line.replace("Thank you", "")) and user_turn_problems(
            [{"role": "system", "content": ""}, {"role": "assistant", "content": line or "ok"}]) == [], line


def test_same_seed_same_text_and_many_shapes_across_tasks():
    req = _requests(3)[1][0]
    assert P.scenario_text(req, "s") == P.scenario_text(req, "s")
    assert P.dress("I want it.", "gold", key="t1") == P.dress("I want it.", "gold", key="t1")
    shapes = set()
    for i in range(80):
        r = Request(f"syn-{i}", [Step("create_task", {"user_id": "user_3", "title": "Pay rent"})])
        t = P.scenario_text(r, "scenario")
        shapes.add(mask(P.dress(_said(t), "gold", key=r.task_id), ["user_3", "Pay rent"]))
    assert len(shapes) >= 60  # one request, 80 tasks: nearly every opening its own shape (the old bank had 5)


def test_done_lines_say_the_request_was_carried_out_and_what_was_done():
    writes = [("create_task", {"user_id": "user_3", "title": "Pay rent"}), ("update_task_status",
                                                                         {"task_id": "task_9", "status": "completed"})]
    lines = {P.done_line(f"t{i}", writes) for i in range(40)}
    assert len(lines) == len(P.DONE_LINES)
    assert all(claims_done(line) for line in lines)
    assert sum("'Pay rent'" in line and "task_9 to completed" in line for line in lines) == len(P.DONE_LINES) - 1


# ----- engine tasks: lookups and facts on request --------------------------------------------------


class Babble(Backend):
    """A stand-in engine model whose every answer is unusable (these tests are about the task's shape and
    its gold dialogue, not about model choices): constrained choices fall back to seeded draws, free-text
    values to the world's templates, and scenario prose fails the fidelity gate, so the bank writes it."""

    def generate_batch(self, conversations, tools=None, params=None):
        return [[Completion(text="As an AI, I am here to help.", raw="As an AI, I am here to help.")] for _ in conversations]


def _proposals(dom, tools, intent, edge, n=4):
    plan = PlanPair(id="p0", slice=Slice(intent, tools, PERSONAS[0], edge), synthesis="s", evaluation="e")
    out = []
    for a in range(n):
        synth = Synthesizer(dom, Chooser(Babble(), seed=a), Prompts(), explore_steps=1)
        prop = synth.propose(plan, "r0-p0", a, f"syn-{intent}-a{a}", seed=a)
        assert prop.task is not None, prop.failure
        out.append(prop.task)
    return out


def _grounded(traj) -> bool:
    return all(agent_turn_problems(agent_view(traj.messages[: i + 1], SYSTEM)) == []
               for i, m in enumerate(traj.messages) if m.role == "assistant" and m.tool_calls)


def test_lookup_tasks_name_the_customer_and_their_gold_dialogue_looks_the_id_up():
    dom = load_domain("mock")
    assert ("lookup_change", ["get_users", "create_task"]) in tool_patterns(dom)
    assert lookup_param(dom, "get_users", "create_task") == "user_id"
    assert lookup_param(dom, "get_users", "update_task_status") is None  # get_users shows no task titles
    for task in _proposals(dom, ["get_users", "create_task"], "lookup_change", EDGES[0]):
        assert [r for r in executable_checks(dom, task) if r.check != "held_out"] == []
        read, write = task.evaluation_criteria.actions
        uid = write.arguments["user_id"]
        assert read.name == "get_users" and uid not in str(task.user_scenario)
        name = next(u["name"] for u in task.initial_state.initialization_data.agent_data["users"].values()
                    if u["user_id"] == uid)
        traj = gold_trajectory(dom, task)
        opening = next(m.content for m in traj.messages if m.role == "user")
        assert name in opening and uid not in opening and write.arguments["title"].lower() in opening.lower()
        calls = [c.name for m in traj.messages if m.role == "assistant" for c in m.tool_calls or []]
        assert calls == ["get_users", "create_task"] and _grounded(traj)  # the id comes from the tool result
        assert verify(dom, task, traj).reward == 1.0 and tau2_verdict("mock", task, traj)["reward"] == 1.0
        assert task_request(dom, task).steps[0].from_results == ["user_id"]
        assert task_tags(task) == {"shape": "get_users>create_task", "phrasing": task_tags(task)["phrasing"]}
        assert task_tags(task)["phrasing"] in PHRASINGS


def test_facts_on_request_tasks_withhold_the_user_id_until_the_agent_asks():
    dom = load_domain("mock")
    for task in _proposals(dom, ["create_task"], "change", EDGES[1]):
        uid = task.evaluation_criteria.actions[-1].arguments["user_id"]
        traj = gold_trajectory(dom, task)
        users = [m.content for m in traj.messages if m.role == "user"]
        assert uid not in users[0] and uid in users[1]  # asked for, then given
        asked = traj.messages[traj.messages.index(next(m for m in traj.messages if m.content == users[1])) - 1]
        assert asked.role == "assistant" and "user id" in asked.content and not asked.tool_calls
        assert _grounded(traj) and verify(dom, task, traj).reward == 1.0
        assert min_episode_steps(task) == len(traj.messages) - 1  # the step budget counts the exchange
        assert "until the agent asks" in task.user_scenario.instructions.task_instructions or \
            "when the agent asks" in task.user_scenario.instructions.task_instructions
        assert scenario_opening(dom, task, "gold") == users[0]  # the same opening every time it is built


def test_a_customer_with_no_id_of_their_own_says_who_they_are_when_asked():
    """Retail's customer is found by email (or name and zip), not by an id they hold: a facts_on_request plan
    had nothing to withhold, so every retail dialogue (51 of 51 in the engine run of 2026-12-05) opened with the
    email and the agent called find_user_id_by_email at once; on tau2's test split the SFT agent then invented
    emails. Now that customer withholds who they are until the agent asks, as the owner's id is withheld."""
    dom = load_domain("retail")
    for task in _proposals(dom, ["cancel_pending_order"], "change", EDGES[1], n=3):
        traj = gold_trajectory(dom, task)
        first = next(c for m in traj.messages if m.role == "assistant" for c in m.tool_calls or [])
        assert first.name in ("find_user_id_by_email", "find_user_id_by_name_zip"), first
        said = [str(v) for v in first.arguments.values()]
        users = [m.content for m in traj.messages if m.role == "user"]
        assert not any(v in users[0] for v in said) and all(v in users[1] for v in said), users[:2]
        asked = traj.messages[traj.messages.index(next(m for m in traj.messages if m.content == users[1])) - 1]
        assert asked.role == "assistant" and not asked.tool_calls and "?" in asked.content
        assert _grounded(traj) and verify(dom, task, traj).reward == 1.0
        assert "when the agent asks" in task.user_scenario.instructions.task_instructions or \
            "until the agent asks" in task.user_scenario.instructions.task_instructions
    # without the edge the first message says who they are, as before
    for task in _proposals(dom, ["cancel_pending_order"], "change", EDGES[0], n=2):
        traj = gold_trajectory(dom, task)
        first = next(c for m in traj.messages if m.role == "assistant" for c in m.tool_calls or [])
        opening = next(m.content for m in traj.messages if m.role == "user")
        assert all(str(v) in opening for v in first.arguments.values()), opening


def test_task_tags_survive_the_task_files_and_read_none_where_absent():
    dom = load_domain("mock")
    task = _proposals(dom, ["create_task", "update_task_status"], "multi_change", EDGES[0], n=1)[0]
    again = Task.model_validate_json(task.model_dump_json(exclude_none=True))  # a tasks.jsonl line read back
    assert task_tags(again) == task_tags(task) and task_tags(task)["shape"] == "create_task>update_task_status"
    assert task_tags(json.loads(task.model_dump_json())) == task_tags(task)  # a dict works too
    assert task_tags(dom.task("create_task_1")) == {"shape": None, "phrasing": None}  # tau2's own notes: plain text
    assert task_tags(dom.tasks("heldout")[0]) == {"shape": "create", "phrasing": "template"}  # the held-out set's own tags
    with pytest.raises(ValueError, match="phrasing must be one of"):
        tagged_notes({}, shape="create_task", phrasing="prose")


def test_opening_variety_masks_values_and_counts_shapes(tmp_path):
    task = {"id": "t1", "evaluation_criteria": {"actions": [{"name": "create_task",
                                                             "arguments": {"user_id": "user_3", "title": "Pay rent"}}]}}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n" + json.dumps({**task, "id": "t2"}) + "\n")
    rows = [("t1", "a", "Hi! Create 'Pay rent' for user_3. Thanks!"), ("t2", "b", "Hi! Create 'Buy milk' for user_9. Thanks!"),
            ("t2", "c", "I am user_3. Please add Pay rent.")]
    (tmp_path / "sft_user.jsonl").write_text("".join(json.dumps(
        {"task_id": t, "trajectory_id": tr, "turn": 0, "meta": {"source": "gold"},
         "messages": [{"role": "assistant", "content": text}]}) + "\n" for t, tr, text in rows))
    got = opening_variety(tmp_path)
    assert (got["dialogues"], got["distinct_openings"]) == (3, 2)
    assert got["distinct_sentences"] == 5  # Hi! / Create <v> for <v>. / Thanks! / I am <v>. / Please add <v>.


def test_every_domain_write_has_a_customer_phrase_that_states_its_values():
    """kit/rollout/domain_phrases.py: for write candidates of airline, retail and telecom (drawn from the
    databases, as the customer sees them), each phrase of the tool renders and names every value the
    customer states; no tool is left to the generic wording (airline's book_reservation was, until it
    had its own phrases and its payment said in words)."""
    import random

    from kit.envs import load_domain
    from kit.envs.arguments import write_candidates
    from kit.rollout.domain_phrases import PHRASES, render
    from kit.rollout.phrasing import _is_owner

    generic = set()
    for name in ("airline", "retail", "telecom"):
        dom = load_domain(name)
        for tool in [t for t in dom.tool_names("assistant") if dom.tool_kind(t) == "write"]:
            cands = write_candidates(name, dom.fork(None).agent_db, tool, random.Random(0), limit=3, as_customer=True)
            for cand in cands:
                stated = {k: v for k, v in cand.arguments.items() if k not in cand.said and not _is_owner(k)}
                n = max((len(opts) for _, opts in PHRASES.get(tool, [])), default=1)
                texts = [render(tool, stated, lambda options, i=i: options[i % len(options)]) for i in range(n)]
                if texts[0] is None:
                    generic.add(tool)
                    continue
                assert all(texts), (tool, stated, texts)
    assert generic == set(), generic


def test_a_tool_named_for_the_user_is_the_customers_account_in_the_generic_wording():
    """retail's modify_user_address in the generic wording said "modify the user address", which the
    user-turn grounding check drops as meta-text ("the user"): 10 of 126 user SFT samples of the retail
    engine run of 2026-12-03. The customer's own record is their account."""
    from kit.grounding import text_problems
    from kit.rollout.request import Step

    text = Step("modify_user_address", {"address1": "1 Main St", "city": "Austin"}).phrase()
    assert text == "modify the account address with address1 '1 Main St' and city Austin"
    assert not [p for p in text_problems(text, (), "", second_person=False) if p.startswith("meta-text")]


def test_the_customers_own_id_is_said_once_for_two_writes_and_lists_never_read_as_json():
    """The airline engine run of 2026-12-03 (6a1024c) said "Your id in the system is omar_johnson_8493. Your
    user id is omar_johnson_8493." for a certificate then a booking (one owner fact per write), and its
    generic wording (15% of template scenarios) read the booking's flights as JSON ("flights [{...}]")."""
    flights = [{"flight_number": "HAT039", "date": "2024-05-28"}]
    people = [{"first_name": "Omar", "last_name": "Johnson", "dob": "1998-09-21"}]
    book = {"user_id": "omar_johnson_8493", "origin": "ATL", "destination": "SEA", "flight_type": "one_way",
            "cabin": "economy", "flights": flights, "passengers": people, "total_baggages": 1,
            "nonfree_baggages": 0, "insurance": "no"}
    request = Request("t", [Step("send_certificate", {"user_id": "omar_johnson_8493", "amount": 200}),
                            Step("book_reservation", book)])
    for seed in range(40):
        for family in ("template", "free_form"):
            st = P.scenario_text(request, seed=seed, family=family)
            text = " ".join(x for x in (st.reason_for_call, st.known_info or "") if x)
            assert text.count("omar_johnson_8493") == 1, text
            assert "[{" not in text and "HAT039" in text, text


def test_a_step_s_reason_is_said_in_every_wording_and_counted_as_a_value():
    """Step.reason (why the customer asks, where the policy needs it: an airline certificate's cancelled
    flight) is in the request's values, in the template and free-form scenarios, and in the known-info facts
    that stand beside model prose which passed the fidelity gate."""
    from kit.rollout.phrasing import facts_text, scenario_text
    from kit.rollout.request import Request, Step

    why = "because flight HAT167 on 2024-05-07 of your reservation O6RY2L was cancelled"
    req = Request(task_id="t", steps=[Step("send_certificate", {"user_id": "sofia_ahmed_9069", "amount": 400},
                                           reason=why)])
    assert why in req.values()
    for seed in range(6):
        assert why in str(facts_text(req, seed)), seed
        text = scenario_text(req, seed=seed)
        assert why in f"{text.reason_for_call} {text.known_info}", (seed, text)


def test_a_domain_tool_never_gets_the_generic_schema_wording():
    """telecom's refuel_data in the generic wording (15% of template scenarios) said "refuel the data with gb
    amount 1.0" (engine run of 2026-12-03): a tool with the domain's own phrases is always asked for in them,
    in every family and seed; a tool no phrase covers (mock's create_task without a title) keeps the generic
    wording as one option."""
    from kit.rollout.request import Request, Step

    request = Request("t", [Step("refuel_data", {"customer_id": "C1001", "gb_amount": 1.0},
                                 described={"line_id": "for the line with the phone number 555-123-2001"})])
    seen_generic = False
    for seed in range(60):
        for family in ("template", "free_form"):
            st = P.scenario_text(request, seed=seed, family=family)
            text = " ".join(x for x in (st.reason_for_call, st.known_info or "") if x)
            assert "gb amount" not in text.lower() and "1.0 GB" in text and "555-123-2001" in text, text
    other = Request("t", [Step("create_task", {"user_id": "user_1", "description": "call the bank"})])
    for seed in range(60):
        st = P.scenario_text(other, seed=seed, family="template")
        seen_generic |= "create a task with" in st.reason_for_call.lower()
    assert seen_generic  # the generic wording is still one option where no phrase exists


def test_a_write_on_the_reservation_a_booking_made_is_asked_for_in_words_not_json():
    """Airline's chained tasks (book, then change the new reservation: its id is the booking's result) said
    "update the new reservation flights with cabin basic_economy and flights [{"flight_number": ...}]" (engine
    run of 2026-12-05): the second write now has phrases of its own for the new booking, in every family."""
    from kit.rollout.request import Request, Step

    flights = [{"flight_number": "HAT086", "date": "2024-05-19"}]
    people = [{"first_name": "Evelyn", "last_name": "Rossi", "dob": "1997-11-08"}]
    book = {"user_id": "evelyn_rossi_4078", "origin": "BOS", "destination": "MIA", "flight_type": "one_way",
            "cabin": "business", "flights": flights, "passengers": people, "total_baggages": 1,
            "nonfree_baggages": 0, "insurance": "no"}
    later = {"update_reservation_flights": {"cabin": "economy", "flights": flights},
             "update_reservation_baggages": {"total_baggages": 3, "nonfree_baggages": 1},
             "update_reservation_passengers": {"passengers": [{"first_name": "Lei", "last_name": "Ahmed",
                                                               "dob": "1958-05-17"}]}}
    for tool, stated in later.items():
        request = Request("t", [Step("book_reservation", book),
                                Step(tool, stated, from_results=["reservation_id"])])
        for seed in range(30):
            for family in ("template", "free_form"):
                st = P.scenario_text(request, seed=seed, family=family)
                text = " ".join(x for x in (st.reason_for_call, st.known_info or "") if x)
                assert "[{" not in text and "update the new reservation" not in text, (tool, text)
                assert "new booking" in text or "new reservation" in text, (tool, text)


def test_enumeration_values_are_said_in_words_and_still_count_as_stated():
    """Airline's requests said "fly round_trip BOS to MIA (business) ... move that new reservation to
    basic_economy" (engine run of 2026-12-05): a customer says "round trip" and "basic economy". The phrase
    says the words; grounding reads an underscore as a space, so the value is still stated (and a phrase
    that drops it is still refused)."""
    from kit.grounding import contains, norm
    from kit.rollout.domain_phrases import PHRASES, render

    flights = [{"flight_number": "HAT086", "date": "2024-05-19"}, {"flight_number": "HAT184", "date": "2024-05-20"}]
    stated = {"origin": "BOS", "destination": "MIA", "flight_type": "round_trip", "cabin": "basic_economy",
              "flights": flights, "passengers": [{"first_name": "Evelyn", "last_name": "Rossi", "dob": "1997-11-08"}],
              "total_baggages": 1, "nonfree_baggages": 0, "insurance": "no"}
    n = len(PHRASES["book_reservation"][0][1])
    for i in range(n):
        text = render("book_reservation", stated, lambda options, i=i: options[i])
        assert text and "_" not in text and "round trip" in text and "basic economy" in text, text
        assert contains(norm(text), "basic_economy") and contains(norm(text), "round_trip")
        assert not contains(norm(text), "economy_plus")
    moved = render("update_reservation_flights", {"cabin": "basic_economy", "flights": flights[:1]},
                   lambda options: options[-1])
    assert moved and "basic economy" in moved and "basic_economy" not in moved
