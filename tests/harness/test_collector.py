"""Python's collector in one state at every cell's warm-up
(harness.collector): the collections during a cell's steps walk only what
its steps made, first in a process or later in a worker, and what a cell
left in reference cycles is still collected before the next."""
import gc
import io
import json
import os
import weakref

import pytest

from workercells import (  # noqa: F401 (autouse fixtures)
    commands, restore_thread_variables, write_spec)
from harness import collector, frameworks, worker
from harness.frameworks import backends
from tests.fake_backend import Backend, Script

pytestmark = pytest.mark.skipif(not hasattr(gc, "freeze"),
                                reason="gc.freeze needs Python 3.7+")


class Cycle:
    """A model's object in a reference cycle: only a collection frees it."""
    def __init__(self):
        self.me = self


class Watched(Backend):
    """The fake backend, counting what the collector tracks at each cell's
    first step, and leaving a cycle behind in each cell."""
    def __init__(self, script):
        super().__init__(script)
        self.tracked_at_first_step = []
        self.cycles = []

    def prepare(self, *args, **kwargs):
        session = super().prepare(*args, **kwargs)
        cycle = Cycle()
        self.cycles.append(weakref.ref(cycle))
        plain_step, seen = session.step, self.tracked_at_first_step
        started = []

        def step():
            if not started:
                started.append(cycle)
                # Objects a collection could walk: the frozen are not.
                seen.append(len(gc.get_objects()))
            return plain_step()
        session.step = step
        return session


def serve(monkeypatch, tmp_path, backend, cells):
    monkeypatch.setattr(frameworks, "load",
                        lambda name, part="backend": backend)
    paths = [write_spec(tmp_path, name, cell) for name, cell in cells]
    assert worker.serve(commands(paths), io.StringIO()) == 0
    return [json.loads((tmp_path / "{}.json".format(n)).read_text())
            for n, _ in cells]


def test_every_cells_steps_walk_only_what_they_made(monkeypatch, tmp_path,
                                                    make_cell):
    backend = Watched(Script([0.1] * 18))
    results = serve(monkeypatch, tmp_path, backend,
                    [(n, make_cell(network=n)) for n in
                     ("fcn5", "lstm32", "alexnet")])
    frozen = [r["environment"]["python_gc"]["frozen_objects"]
              for r in results]
    assert [r["status"] for r in results] == ["ok"] * 3
    # This test process holds some 50,000 objects; at each first step, the
    # collector could walk a few hundred at most, first cell or later.
    assert min(frozen) > 20_000
    assert all(n < 0.01 * f for n, f in
               zip(backend.tracked_at_first_step, frozen))
    assert all(r["environment"]["python_gc"]["enabled"] for r in results)


def test_a_cells_cycles_are_collected_before_the_next(monkeypatch, tmp_path,
                                                      make_cell):
    backend = Watched(Script([0.1] * 12))
    serve(monkeypatch, tmp_path, backend,
          [("a", make_cell()), ("b", make_cell(network="fcn5"))])
    first, second = backend.cycles
    # a's cycle, frozen at its warm-up, was thawed and collected before b;
    # b's is the last cell's, which the process keeps until it exits.
    assert first() is None
    assert second() is not None


def test_settle_freezes_what_is_alive_and_says_so():
    collector.thaw()
    alive = [Cycle() for _ in range(100)]
    block = collector.settle()
    assert block["frozen_objects"] == gc.get_freeze_count() >= len(alive)
    assert block["thresholds"] == list(gc.get_threshold())
    assert block["settle_s"] >= 0
    collector.thaw()
    assert gc.get_freeze_count() == 0


def test_a_forked_child_counts_what_it_froze_without_a_walk(monkeypatch):
    # A fork server froze its heap; its child counts only what it froze
    # itself (Python's count walks every frozen object), then thaws and
    # freezes again as a worker between cells does.
    monkeypatch.setattr(collector, "_frozen", None, raising=False)
    server = collector.collect_and_freeze()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            alive = [Cycle() for _ in range(1000)]
            walks, count = [], gc.get_freeze_count
            gc.get_freeze_count = lambda: walks.append(1) or count()
            settled = collector.settle()["frozen_objects"]
            gc.get_freeze_count = count
            collector.thaw()
            again = collector.freeze()
            counts = [settled, len(walks), again, gc.get_freeze_count(),
                      len(alive)]
            os.write(write, json.dumps(counts).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        settled, walks, again, own, alive = json.loads(pipe.read())
    os.waitpid(pid, 0)
    collector.thaw()
    assert walks == 0
    # Python's count loses the server's frozen objects the child freed
    # (a few of pytest's); the child's counts what was frozen.
    assert settled >= server + alive
    assert again == own >= alive


def counted_walks(monkeypatch):
    walks = []
    real_collect = gc.collect

    def counted(*args):
        walks.append(args)
        return real_collect(*args)
    monkeypatch.setattr(gc, "collect", counted)
    return walks


def test_the_backend_makes_the_workers_one_collection_where_it_needs_it(
        monkeypatch, tmp_path, make_cell):
    # PyTorch's on a GPU, before empty_cache: a tensor the cell before
    # left in a cycle keeps its block until it is collected.
    backend = Watched(Script([0.1] * 12))
    walks = counted_walks(monkeypatch)
    freed_before_cache = []

    def release_memory(device, collect):
        collect()
        freed_before_cache.append(backend.cycles[0]() is None)
        collect()  # a second call walks nothing
        return backends.memory_report(["empty_cache()"], None, "emptied")
    backend.release_memory = release_memory
    serve(monkeypatch, tmp_path, backend,
          [("a", make_cell()), ("b", make_cell(network="fcn5"))])
    assert freed_before_cache == [True]
    # a's settle, the one between the cells, b's settle.
    assert len(walks) == 3


class Session:
    """A framework's global state: it keeps the models built so far alive
    until the backend drops it (Keras's clear_session)."""
    models = []


def test_what_the_backend_lets_go_is_collected_after_it(
        monkeypatch, tmp_path, make_cell):
    # A backend that does not collect: the worker collects after it, so
    # what it let go is freed, not frozen until the worker ends.
    backend = Watched(Script([0.1] * 12))
    walks = counted_walks(monkeypatch)
    model = Cycle()
    Session.models.append(model)
    held = weakref.ref(model)
    del model

    def release_memory(device, collect):
        del Session.models[:]
        return backends.memory_report(["clear_session()"], None, "cleared")
    backend.release_memory = release_memory
    serve(monkeypatch, tmp_path, backend,
          [("a", make_cell()), ("b", make_cell(network="fcn5"))])
    assert held() is None
    assert backend.cycles[0]() is None
    assert len(walks) == 3
