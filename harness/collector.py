"""Python's cyclic garbage collector in one state at every cell's warm-up,
whatever ran before it in its process.

A full collection walks every object the collector tracks: after the
framework's import and a model build, 75,000 (MXNet) to 285,000 (PyTorch)
objects, 11-76 ms on a 2-core CPU. CPython runs one once the objects
that survived younger collections since the last full one exceed a
quarter of those it kept then, so a fresh process, whose import has just
created them all, runs one within its first few dozen steps (JAX
alexnet-r at batch 16: one of 25 ms among 20 ms steps), while a worker
whose earlier cells ended in a full collection and froze what was left
runs none. That made a JAX cell after others in one process 3-6% faster
than the same cell in a process of its own (alexnet-r 0.941 [0.909,
0.975], lstm 0.965, resnet50, whose steps last 1.2 s, 0.992;
docs/measurements/isolation-2026-12-02), and it lands on small steps
wherever a cell is short (on a GPU, most of them).

So every cell's process collects and freezes (gc.freeze, Python 3.7+)
everything alive once the model is built (`settle`): the collections
during warm-up and timed steps walk only what those steps made, in a
process of its own and at any place in a worker alike; and a long
training run reaches the same state, as the collector's full walks
there grow rare. Between two cells a worker thaws it all (`thaw`) and
makes one full collection (`Collection`), so that what the cells before
left in reference cycles is freed, then freezes what survives
(`freeze`), which keeps the next cell's settle to its own model's
objects. A full walk costs 11-76 ms (TensorFlow's 275,000 objects: 0.16 s
on a loaded 2-core VM), so it is made once: the worker hands it to the
backend's release_memory, which makes it where its framework needs it
(after its own state is dropped, before a cache is emptied that a tensor
in a cycle would keep), and makes it itself after release_memory where
the backend did not.
"""
import gc
import time

# How many objects this process has frozen, counted as it froze them (a
# forked child inherits its server's count), or None: not counted yet.
# Python's own count, gc.get_freeze_count, walks every frozen object: 26 ms
# of each model build in a cell forked from PyTorch's server (283,000
# objects, 2-core VM), where the objects the child froze itself number a
# few thousand. A frozen object freed later leaves Python's count, not
# this one: a handful of the server's, freed in the child.
_frozen = None


def freeze():
    """What is alive now frozen out of every later collection. Returns
    how many objects are frozen (None before 3.7: gc.freeze and its count
    are 3.7+)."""
    global _frozen
    gc_freeze, count = (getattr(gc, name, None)
                        for name in ("freeze", "get_freeze_count"))
    if gc_freeze is None:
        return None
    added = _unfrozen() if _frozen is not None else None
    gc_freeze()
    _frozen = count() if added is None else _frozen + added
    return _frozen


def _unfrozen():
    """How many objects the collector tracks outside the frozen ones, or
    None where it cannot say by generation (3.7). One expression: the
    lists it counts are freed as it goes, and the list get_objects builds
    leaves itself out."""
    try:
        return (len(gc.get_objects(0)) + len(gc.get_objects(1))
                + len(gc.get_objects(2)))
    except TypeError:
        return None


def collect_and_freeze():
    """A full collection, then what survives frozen: freeze's count."""
    gc.collect()
    return freeze()


def settle(clock=time.perf_counter):
    """At a cell's warm-up: the result's environment.python_gc block."""
    start = clock()
    frozen = collect_and_freeze()
    return {"enabled": gc.isenabled(),
            "thresholds": list(gc.get_threshold()),
            "frozen_objects": frozen,
            "settle_s": round(clock() - start, 6)}


def thaw():
    """Everything frozen back into the collector's oldest generation, so
    that a collection finds the cycles a finished cell left."""
    global _frozen
    unfreeze = getattr(gc, "unfreeze", None)
    if unfreeze is not None:
        unfreeze()
        _frozen = 0


class Collection(object):
    """The one full collection a worker makes between two cells: calling
    it collects the first time and does nothing after."""

    def __init__(self):
        self.made = False

    def __call__(self):
        if not self.made:
            gc.collect()
            self.made = True


def between_cells(release):
    """A worker's collector between two cells: thawed, `release(collect)`
    (the backend's release_memory, handed the one collection), the
    collection where release did not make it, what survives frozen.
    Returns what release returned."""
    thaw()
    collect = Collection()
    try:
        return release(collect)
    finally:
        collect()
        freeze()
