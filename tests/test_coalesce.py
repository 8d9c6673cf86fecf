"""kit/llm/coalesce.py: worker threads share one in-process model; their calls run as one batch.

The real embedded model throughout (no fake backend)."""

from __future__ import annotations

import threading

import pytest
from test_llm_hf import backend, model_dir, one_thread  # noqa: F401 - the embedded backend, one torch thread

from kit.llm.coalesce import Coalescer
from kit.llm.types import SamplingParams

PROMPTS = ["Name a fruit.", "Name a color.", "Name a city.", "Name an animal."]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=12)


def _workers(coalescer, model, calls_each: int = 2) -> dict[str, list[str]]:
    """Four worker threads, each asking `calls_each` seeded questions in turn and one scoring."""
    out: dict[str, list[str]] = {}

    def work(i: int) -> None:
        with group.worker(f"w{i}"):
            texts = []
            for k in range(calls_each):
                msgs = [{"role": "user", "content": PROMPTS[i]}]
                texts.append(model.chat(msgs, params=PARAMS.model_copy(update={"seed": 100 * i + k}))[0].text)
            scores = model.score_options([{"role": "user", "content": PROMPTS[i]}], ["yes", "no"])
            texts.append(f"{scores[0]:.3f}")
            out[f"w{i}"] = texts

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    with coalescer.workers(total=4, width=4) as group:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    return out


def test_workers_calls_run_batched_and_reproducibly(backend):
    first = Coalescer()
    a = _workers(first, first.wrap(backend))
    assert sorted(a) == ["w0", "w1", "w2", "w3"] and all(len(v) == 3 for v in a.values())
    # each round held one call of every live worker: the 8 generation calls ran as 2 batches of 4 rows
    assert first.rows_batched == 8, first.summary()
    assert first.rounds == 3 and first.calls == 12
    second = Coalescer()
    b = _workers(second, second.wrap(backend))
    assert a == b  # the same batches, the same seeds: the same texts, whatever the threads' timing


def test_a_row_samples_from_its_own_seed(backend):
    """A row's draws come from its own stream: alone or beside other rows, its seed gives the same
    tokens (at temperature 1 over 12 tokens, unless float rounding of a batch moves a near tie)."""
    convs = [[{"role": "user", "content": p}] for p in PROMPTS]
    together = backend.generate_seeded(convs, None, PARAMS, [7, 8, 9, 10])
    alone = [backend.generate_seeded([c], None, PARAMS, [s])[0] for c, s in zip(convs, [7, 8, 9, 10])]
    same = sum(x.token_ids == y.token_ids for x, y in zip(together, alone))
    assert same >= 3, [(x.text, y.text) for x, y in zip(together, alone)]
    other = backend.generate_seeded(convs, None, PARAMS, [70, 80, 90, 100])
    assert [c.token_ids for c in other] != [c.token_ids for c in together]


def test_non_worker_calls_go_straight_through_and_errors_reach_their_caller(backend):
    coalescer = Coalescer()
    model = coalescer.wrap(backend)
    assert model.caps.parallel and not backend.caps.parallel
    assert model.tokenizer is backend.tokenizer  # everything else is the wrapped backend's
    text = model.chat([{"role": "user", "content": "Hi"}], params=PARAMS.model_copy(update={"seed": 1}))[0].text
    assert isinstance(text, str) and coalescer.rounds == 0 and coalescer.calls == 1

    errors = []

    def bad() -> None:
        with group.worker("bad"):
            try:
                model.score_options(None, ["a"])  # no conversation: the backend raises
            except Exception as e:  # noqa: BLE001 - what the caller sees is the point
                errors.append(e)

    def good(out: list) -> None:
        with group.worker("good"):
            out.append(model.chat([{"role": "user", "content": "Hi"}], params=PARAMS.model_copy(update={"seed": 2})))

    got: list = []
    threads = [threading.Thread(target=bad), threading.Thread(target=good, args=(got,))]
    with coalescer.workers(total=2, width=2) as group:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(errors) == 1 and len(got) == 1 and got[0][0].text is not None


@pytest.mark.timeout(300)  # a slot left open hangs every worker: fail instead
def test_queued_jobs_take_a_finished_workers_slot(backend):
    """Five jobs on a pool of two threads: every job runs, rounds keep batching two rows, none hangs."""
    from concurrent.futures import ThreadPoolExecutor

    coalescer = Coalescer()
    model = coalescer.wrap(backend)

    def job(i: int) -> str:
        with group.worker(f"j{i}"):
            msgs = [{"role": "user", "content": PROMPTS[i % 4]}]
            return model.chat(msgs, params=PARAMS.model_copy(update={"seed": i, "max_new_tokens": 4 + i}))[0].text

    with coalescer.workers(total=5, width=2) as group, ThreadPoolExecutor(max_workers=2) as pool:
        texts = list(pool.map(job, range(5), timeout=300))
    assert len(texts) == 5 and coalescer.calls == 5
    assert coalescer.rows_batched == 4 and coalescer.rounds == 3, coalescer.summary()  # 2 + 2 + the last alone


@pytest.mark.timeout(300)
def test_a_worker_lends_its_slot_to_its_own_jobs(backend):
    """Two workers, each starting three jobs of its own (the engine: units, then their proposals):
    all eight calls run, the nested jobs' rows batched together, nothing hangs."""
    from concurrent.futures import ThreadPoolExecutor

    coalescer = Coalescer()
    model = coalescer.wrap(backend)

    def ask(key: str, seed: int) -> str:
        msgs = [{"role": "user", "content": PROMPTS[seed % 4]}]
        return model.chat(msgs, params=PARAMS.model_copy(update={"seed": seed, "max_new_tokens": 4}))[0].text

    def unit(u: int) -> list[str]:
        with outer.worker(f"u{u}"):
            first = ask(f"u{u}", u)
            with coalescer.workers(total=3, width=3) as inner, ThreadPoolExecutor(max_workers=3) as pool:
                def job(a: int) -> str:
                    with inner.worker(f"u{u}-a{a}"):
                        return ask(f"u{u}-a{a}", 10 * u + a)
                return [first] + list(pool.map(job, range(3), timeout=300))

    with coalescer.workers(total=2, width=2) as outer, ThreadPoolExecutor(max_workers=2) as pool:
        out = list(pool.map(unit, range(2), timeout=300))
    assert [len(x) for x in out] == [4, 4] and coalescer.calls == 8
    assert coalescer.rows_batched == 8, coalescer.summary()  # 2 first calls, then 6 jobs' calls in one round


@pytest.mark.timeout(300)
def test_jobs_that_finish_without_a_call_leave_no_slot_open(backend):
    """A unit whose proposals all fail before asking the model (seen: a make run hung, every thread
    waiting for slots nobody held) beside a unit that asks: both finish."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    coalescer = Coalescer()
    model = coalescer.wrap(backend)

    def unit(u: int) -> int:
        with outer.worker(f"u{u}"):
            with coalescer.workers(total=4, width=4) as inner, ThreadPoolExecutor(max_workers=4) as pool:
                def job(a: int) -> int:
                    with inner.worker(f"u{u}-a{a}"):
                        if u == 0:
                            time.sleep(0.05 * a)  # they finish one by one, some before others start
                            return 0
                        msgs = [{"role": "user", "content": PROMPTS[a]}]
                        model.chat(msgs, params=PARAMS.model_copy(update={"seed": a, "max_new_tokens": 3}))
                        return 1
                return sum(pool.map(job, range(4), timeout=120))

    with coalescer.workers(total=2, width=2) as outer, ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(unit, range(2), timeout=120)) == [0, 4]
    assert coalescer._live == 0 and coalescer.rows_batched == 4
