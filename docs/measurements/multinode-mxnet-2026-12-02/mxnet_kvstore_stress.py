"""MXNet's two-node training, stripped to its invariant and run many times:
after every step, do both workers hold bit-identical weights?

    .venvs/mxnet-cpu/bin/python \
        docs/measurements/multinode-mxnet-2026-12-02/mxnet_kvstore_stress.py \
        [--launches 20] [--steps 200] [--load 2] [--network fcn-r]

Each launch starts what harness/frameworks/mxnet/parallel.py starts on two
nodes of one machine (a ps-lite scheduler and server, and one worker per
"node" on 127.0.0.1), but every worker here drives the harness's own
_Trainer directly: `--steps` steps of synthetic data, and after each step
a digest of all its weights (and of its part's loss) on stdout. Both
workers pull the same summed gradients and apply the same update, so their
digests must be identical at every step; the first step where they differ
is printed. `--load K` runs K busy-looping processes beside each launch.

`--pull-priority P --busy N` try to force one suspected race (issue 23,
item 15; README.md beside this script): Gluon's Trainer initialises each key inside
its first step, a pull into the weights beside that step's gradient
pushpull, and the server holds gradient sums once a round of them is in.
With the pull at priority P and N matrix products queued first on ps-lite
worker 1's engine, a pull run after the pushpull would show as differing
weights from step 0. It never did: MXNet's CPU engine runs ready
operations first in, first out, whatever their priority. Run it against a
checkout from before the Trainer's keys were initialised ahead of training
(harness/frameworks/mxnet/parallel.py: _broadcast_before_training); with
it, there is no pull left to race.
"""
import argparse
import hashlib
import json
import os
import sys

# This folder is docs/measurements/<topic>/ of the repository.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

import mxnet_two_nodes as two_nodes  # noqa: E402  (beside this script)


def delay_broadcast_pulls(kvstore, priority):
    """Gluon's Trainer initialises each key with kvstore.broadcast (init,
    then a pull of the key's value into the weights) at its first step;
    this does the same with the pull at `priority`, the lowest there is,
    so that a priority queue would run the step's gradient pushpull (on
    which it does not depend) first."""
    pull = kvstore.pull

    def broadcast(key, value, out, priority_=0):
        kvstore.init(key, value)
        pull(key, out=out, priority=priority)
    kvstore.broadcast = broadcast


def keep_engine_busy(mx, seconds_of_work):
    """A chain of matrix products queued on the CPU engine (one worker
    thread) of ps-lite's worker 1 before the first step, as a loaded
    machine's slow backward would keep it: that node lags, and what its
    step queues next waits (worker 0 waits for its engine in the kvstore's
    init, so a lag there would not last)."""
    a = mx.nd.ones((1500, 1500)) / 1500.0
    for _ in range(seconds_of_work):
        a = mx.nd.dot(a, a)
    return a


def worker(plan_path, steps, pull_priority=None, busy=0):
    """One node's worker: the harness's _Trainer, a digest per step."""
    with open(plan_path) as handle:
        the_plan = json.load(handle)
    from harness.frameworks import dataparallel
    from harness.frameworks.mxnet import parallel
    data = dataparallel.load_data(the_plan["data"], the_plan["seed"])
    trainer = parallel._Trainer(the_plan, data)
    if pull_priority is not None:
        delay_broadcast_pulls(trainer.kvstore, pull_priority)
    batches = []
    epoch = 0
    while len(batches) < steps:
        order = dataparallel.epoch_order(data.train.count, the_plan["seed"],
                                         epoch)
        batches.extend(dataparallel.global_batches(
            order, the_plan["global_batch_size"]))
        epoch += 1
    params = list(trainer.model.collect_params().values())
    for step, batch in enumerate(batches[:steps]):
        if step == 0 and busy and trainer.kvstore.rank == 1:
            keep_engine_busy(trainer.mx, busy)
        loss = trainer.step(batch)
        digest = hashlib.sha1()
        for param in params:
            digest.update(param.data(trainer.contexts[0]).asnumpy().tobytes())
        print("step {} {} {!r}".format(step, digest.hexdigest(), loss),
              flush=True)
    return 0


def launch(args, tmp, index):
    """(both workers' exit codes, each worker's "step" lines split)."""
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")

    def worker_argv(rank, plan_path):
        return [sys.executable, __file__, "--worker", plan_path, "--steps",
                str(args.steps)] + (
                    [] if args.pull_priority is None else
                    ["--pull-priority", str(args.pull_priority)]) + [
                        "--busy", str(args.busy)]
    logs = [open(os.path.join(tmp, "worker{}-{}.log".format(index, r)), "w+")
            for r in (0, 1)]
    try:
        codes = two_nodes.run(env, tmp, index, worker_argv, logs,
                              args.network)
        lines = []
        for log in logs:
            log.seek(0)
            lines.append([l.split() for l in log if l.startswith("step ")])
        return codes, lines
    finally:
        for log in logs:
            log.close()


def compare(lines):
    """(first step whose weights differ or None, steps compared)."""
    a, b = lines
    for x, y in zip(a, b):
        if x[2] != y[2]:
            return int(x[1]), min(len(a), len(b))
    return None, min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--network", default="fcn-r")
    parser.add_argument("--pull-priority", type=int)
    parser.add_argument("--busy", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps, args.pull_priority, args.busy)
    import tempfile
    bad = 0
    with tempfile.TemporaryDirectory(prefix="mxnet-stress-") as tmp:
        for index in range(1, args.launches + 1):
            (codes, lines), wall = two_nodes.loaded(
                args.load, lambda: launch(args, tmp, index))
            first, compared = compare(lines)
            if first is not None or codes != [0, 0] or \
                    compared < args.steps:
                bad += 1
            print("launch {}: exit {}, {} steps compared, {} ({:.1f} s)"
                  .format(index, codes, compared,
                          "weights identical at every step" if first is None
                          else "weights DIFFER from step {}".format(first),
                          wall), flush=True)
            if first is not None:
                a, b = lines
                for x, y in list(zip(a, b))[max(0, first - 1):first + 3]:
                    print("   ", " ".join(x[1:]), "|", " ".join(y[2:]))
    print("{} of {} launches bad".format(bad, args.launches))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
