"""Several threads, one in-process model: their model calls run as one batch.

An in-process model (HFBackend) runs one forward pass at a time (`caps.parallel` False), so the engine
used to run its units (plans) one after another, and each of a unit's model calls (a title, a
scenario, a judgment) was a batch of one row: on a 2-core CPU the embedded 135M model decodes a
batch of five rows in not much more time than one row. `Coalescer` lets the units run in threads
and share the model:

    coalescer = Coalescer()
    model = coalescer.wrap(hf_backend)            # a Backend with caps.parallel True
    with coalescer.workers(total=5, width=5) as group:  # the main thread announces the jobs, then
        ...                                             # starts them, each in a thread:
            with group.worker("r0-p3"):
                model.chat(...)                         # waits for the other workers' calls, runs with them

A call from a registered worker waits until every live worker has one call pending (or has left);
then the last one to arrive runs the round: generation calls of the same backend with the same
tools and sampling settings (but for the token limit: each row keeps its own) as one batch, each
row with its own seed (`HFBackend.generate_seeded`: a row's random draws do not depend on the other
rows), every other call (scoring options, calls asking for several samples) one after another, in
the workers' key order. A round holds exactly one
call of each live worker, so which calls run together does not depend on thread timing: the same
run makes the same batches. (Logits of a row can differ from a batch of one by float rounding, as
in any batch.) A thread that is not a registered worker calls straight through, one at a time.

A worker may start jobs of its own (`workers` inside a job: the engine runs a unit's task proposals
side by side): it lends them its slot until they are done.

One coalescer serves all the backends a worker uses (engine model, agent, user), so a round never
waits on a worker that is waiting on another backend.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Optional

from kit.llm.types import Backend, ChatMessage, Completion, SamplingParams, ToolSchema, as_params


@dataclass
class _Call:
    backend: "Coalesced"
    kind: str  # "generate" or "other"
    key: str  # the worker's key: the order calls run in
    conversations: list = field(default_factory=list)
    tools: Any = None
    params: Optional[SamplingParams] = None
    fn: Optional[Callable[[], Any]] = None
    result: Any = None
    error: Optional[BaseException] = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Group:
    """Worker jobs announced together (`Coalescer.workers`)."""

    total: int
    width: int
    unstarted: int
    coalescer: Optional["Coalescer"] = None
    running: int = 0

    def slots(self) -> int:
        """Workers of this group a round waits for: those running and those that will take a free thread."""
        return min(self.width, self.unstarted + self.running)

    def worker(self, key: str):
        """Run the `with` block as one of the group's jobs, named `key` (rounds run calls in key order)."""
        return self.coalescer._worker(self, key)


class Coalescer:
    """The rendezvous of the worker threads (see the module doc)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._run_lock = threading.Lock()  # one round (or one direct call) at a time
        self._local = threading.local()
        self._live = 0  # worker slots a round waits for
        self._unstarted = 0  # announced jobs not started yet
        self._pending: list[_Call] = []
        self.rounds = 0
        self.calls = 0
        self.rows_batched = 0  # generation rows that ran in a batch with another worker's rows

    def wrap(self, backend: Backend) -> "Coalesced":
        return backend if isinstance(backend, Coalesced) else Coalesced(backend, self)

    @contextlib.contextmanager
    def workers(self, total: int, width: int) -> Iterator["_Group"]:
        """Announce `total` worker jobs, at most `width` running at once (a thread pool's queue); each
        job runs inside `group.worker(key)`. A round waits for `min(total, width)` of them from the
        start, and a finished job's slot stays open while jobs of its group are queued (the next one
        takes it), so no round starts before the workers it should hold have arrived, however the
        threads are scheduled."""
        group = _Group(total=total, width=width, unstarted=total, coalescer=self)
        nested = getattr(self._local, "key", None) is not None  # a worker that waits for its own jobs
        with self._cv:
            self._live += group.slots() - nested  # ... lends them its slot meanwhile
        try:
            yield group
        finally:
            with self._cv:  # jobs that never started (cancelled) hold no slot
                self._live -= group.slots()
                group.unstarted = group.running = 0
                self._live += nested
                batch = self._take_full()
            if batch:
                self._run(batch)

    @contextlib.contextmanager
    def _worker(self, group: "_Group", key: str) -> Iterator[None]:
        outer = getattr(self._local, "key", None)
        self._local.key = str(key)
        with self._cv:
            group.unstarted -= 1
            group.running += 1
        try:
            yield
        finally:
            self._local.key = outer
            with self._cv:
                before = group.slots()
                group.running -= 1
                self._live -= before - group.slots()  # the slot closes unless a queued job takes it
                batch = self._take_full()
            if batch:
                self._run(batch)

    def summary(self) -> str:
        return (f"{self.calls} model calls in {self.rounds} rounds "
                f"({self.rows_batched} generation rows batched with other workers')")

    # ----- internals ------------------------------------------------------------------------------

    def _take_full(self) -> Optional[list[_Call]]:
        """Under the condition's lock: the pending calls, if every live worker has one."""
        if self._pending and len(self._pending) >= self._live:
            batch, self._pending = self._pending, []
            return batch
        return None

    def submit(self, call: _Call) -> Any:
        key = getattr(self._local, "key", None)
        if key is None:  # not a worker: straight through, one call at a time
            with self._run_lock:
                self.calls += 1
                return self._direct(call)
        call.key = key
        with self._cv:
            self._pending.append(call)
            batch = self._take_full()
        if batch:
            self._run(batch)
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    @staticmethod
    def _direct(call: _Call) -> Any:
        if call.kind == "generate":
            return call.backend.inner.generate_batch(call.conversations, call.tools, call.params)
        return call.fn()

    def _run(self, batch: list[_Call]) -> None:
        batch = sorted(batch, key=lambda c: c.key)
        with self._run_lock:
            self.rounds += 1
            self.calls += len(batch)
            groups: dict[tuple, list[_Call]] = {}
            for call in batch:
                p = call.params
                if call.kind == "generate" and p.n == 1 and p.seed is not None and call.backend.seeded:
                    gkey = (id(call.backend), json.dumps(call.tools, sort_keys=True, default=str),
                            p.model_copy(update={"seed": None, "max_new_tokens": 1}).model_dump_json())
                else:
                    gkey = ("alone", id(call))
                groups.setdefault(gkey, []).append(call)
            for calls in groups.values():
                try:
                    if len(calls) == 1:
                        calls[0].result = self._direct(calls[0])
                    else:
                        self._batched(calls)
                except BaseException as e:  # noqa: BLE001 - handed to every caller of the group
                    for c in calls:
                        c.error = e
                for c in calls:
                    c.done.set()

    def _batched(self, calls: list[_Call]) -> None:
        """Seeded single-sample generation calls of one backend and settings: all their rows at once.
        Row j of a call seeded s draws from the stream of seed s + j."""
        rows, seeds, limits, owners = [], [], [], []
        for c in calls:
            for j, conv in enumerate(c.conversations):
                rows.append(conv)
                seeds.append(c.params.seed + j)
                limits.append(c.params.max_new_tokens)
                owners.append(c)
        inner = calls[0].backend.inner
        outs = inner.generate_seeded(rows, calls[0].tools, calls[0].params, seeds, max_new_tokens=limits)
        self.rows_batched += len(rows)
        for c in calls:
            c.result = []
        for c, comp in zip(owners, outs):
            c.result.append([comp])


class Coalesced(Backend):
    """A backend whose calls go through a `Coalescer`; everything else is the wrapped backend's."""

    def __init__(self, inner: Backend, coalescer: Coalescer):
        self.inner = inner
        self.coalescer = coalescer
        self.caps = replace(inner.caps, parallel=True)
        self.tool_mode = inner.tool_mode
        self.seeded = callable(getattr(inner, "generate_seeded", None))

    def generate_batch(self, conversations: list[list[ChatMessage]], tools: list[ToolSchema] | None = None,
                       params: SamplingParams | dict | None = None) -> list[list[Completion]]:
        return self.coalescer.submit(_Call(self, "generate", "", conversations=list(conversations), tools=tools,
                                           params=as_params(params)))

    def score_options(self, messages: list[dict], options: list[str]) -> list[float]:
        return self.coalescer.submit(_Call(self, "other", "", fn=lambda: self.inner.score_options(messages, options)))

    def clear_cache(self) -> None:
        self.inner.clear_cache()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # tokenizer, render, stats, model, invalidate ...
        return getattr(self.inner, name)
