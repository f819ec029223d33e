"""What a cell's steps pay for that its process's history decides: each
step's seconds, the page faults it took and Python's full collections
that ran in it, for one or more networks in one process, one after
another as a group's worker runs them (between cells: the collector
thawed, the framework's release_memory, a collection, the heap trimmed).

Runs inside a framework's environment, with the repository on PYTHONPATH,
once per process; compare a network alone with the same network after
others:

    PYTHONPATH=. .venvs/jax-cpu/bin/python \\
        docs/measurements/isolation-2026-12-02/step_events.py \\
        --framework jax alexnet-r:16
    PYTHONPATH=. .venvs/jax-cpu/bin/python \\
        docs/measurements/isolation-2026-12-02/step_events.py \\
        --framework jax lstm:8 alexnet-r:16

--unsettled leaves Python's collector as it was before harness.collector
(nothing frozen at the warm-up); --jax-async-dispatch lets JAX hand CPU
steps to its pool threads again, as before the backend ran them inline.
"""
import argparse
import gc
import resource
import sys
import time

from harness import allocator, collector, frameworks, networks, threads


def parse_cell(text):
    name, _, batch = text.partition(":")
    networks.get(name)
    return name, int(batch or 8)


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", required=True, choices=frameworks.NAMES)
    parser.add_argument("--steps", type=int, default=7,
                        help="steps a cell (the smoke suite: 2 warm-up + 5)")
    parser.add_argument("--unsettled", action="store_true")
    parser.add_argument("--jax-async-dispatch", action="store_true")
    parser.add_argument("cells", nargs="+", type=parse_cell,
                        metavar="NETWORK:BATCH")
    args = parser.parse_args(argv)
    threads.apply(1)
    allocator.hold()
    backend = frameworks.load(args.framework)
    backend.configure(1, "cpu", 0)
    if args.jax_async_dispatch:
        import jax
        jax.config.update("jax_cpu_enable_async_dispatch", True)
    full = []
    gc.callbacks.append(lambda phase, info: full.append(phase) if (
        phase == "start" and info["generation"] == 2) else None)
    for place, (name, batch) in enumerate(args.cells):
        if place:
            collector.between_cells(
                lambda collect: backend.release_memory("cpu", collect))
            allocator.give_back()
        session = backend.prepare(networks.get(name), batch, "cpu", 0)
        if not args.unsettled:
            collector.settle()
        rows = []
        for _ in range(args.steps):
            del full[:]
            before, start = faults(), time.perf_counter()
            session.step()
            rows.append("{:.4f}s/{}f/{}c".format(
                time.perf_counter() - start, faults() - before, len(full)))
        print("{} {}:{} (place {}): {}".format(
            args.framework, name, batch, place + 1, " ".join(rows)))
        sys.stdout.flush()
        del session
    return 0


if __name__ == "__main__":
    sys.exit(main())
