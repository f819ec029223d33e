"""MXNet's two-node first updates, many times over: which array goes wrong
when a two-node run's first update saturates the model (issue 23, item 15;
README.md beside this script)?

    .venvs/mxnet-cpu/bin/python \
        docs/measurements/multinode-mxnet-2026-12-02/mxnet_first_update.py \
        [--launches 40] [--steps 3] [--load 2] [--keep DIR]

Each launch starts what harness/frameworks/mxnet/parallel.py starts on two
nodes of one machine (a ps-lite scheduler and server, one worker per
"node" on 127.0.0.1, the harness's thread variables for one thread), and
every worker drives the harness's own _Trainer for `--steps` steps of
synthetic fcn-r (global batch 64). After _broadcast_before_training and
after every step (once the engine has finished: nothing is read while a
step runs) a worker saves its weights and the gradients the kvstore left
in the gradient arrays (the sum over both nodes) to DIR/launchI-rankR.npz.
Every launch must give bit-identical arrays (the same seed, data and
thread counts); each is compared with launch 1 and the first array that
differs is printed, with how its difference relates to the arrays of a
good launch (the weights? one node's part? garbage?). Each worker also
copies its own gradient before the pushpull (an engine operation, no
wait): a launch prints every key whose kvstore sum is not exactly node0's
plus node1's. `--gluon-init` runs the code before
_broadcast_before_training (Gluon's Trainer initialises the keys inside
its first step), which every divergence seen so far may have had.

    .venvs/mxnet-cpu/bin/python \
        docs/measurements/multinode-mxnet-2026-12-02/mxnet_first_update.py \
        --what-if DIR/launch1-rank0.npz DIR/launch1-rank1.npz

prints the second iteration's loss after first updates made of the wrong
arrays a kvstore mix-up could give (a node's gradient missing or counted
twice, the weights added, no 1/64, weights replaced by gradients): which
of them can give the 1478.0 of README.md beside this script; with
`--closest-to 1478.0`, also the choices of weights replaced by gradients, key by key,
that come nearest (1024 second losses: minutes).
"""
import argparse
import os
import sys
import tempfile

# This folder is docs/measurements/<topic>/ of the repository.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

import mxnet_two_nodes as two_nodes  # noqa: E402  (beside this script)


def snapshot(trainer, params, tag, arrays):
    trainer.mx.nd.waitall()
    context = trainer.contexts[0]
    for i, param in enumerate(params):
        arrays["{}.w{}".format(tag, i)] = param.data(context).asnumpy()
        if tag != "init":
            arrays["{}.g{}".format(tag, i)] = param.grad(context).asnumpy()


def step_grads(trainer, params, local):
    """Has Trainer.step copy each parameter's own gradient (this node's
    part, before the kvstore sums it) as an engine operation queued between
    the backward and the pushpull: nothing waits for it."""
    step = trainer.trainer.step
    context = trainer.contexts[0]

    def copying_step(batch_size, ignore_stale_grad=False):
        local.extend(p.grad(context).copy() for p in params)
        trainer.trainer.step = step
        return step(batch_size, ignore_stale_grad)
    trainer.trainer.step = copying_step


def worker(plan_path, steps, out, gluon_init=False):
    import json
    with open(plan_path) as handle:
        the_plan = json.load(handle)
    from harness.frameworks import dataparallel
    from harness.frameworks.mxnet import parallel
    if gluon_init:
        # The code before _broadcast_before_training: Gluon's Trainer
        # initialises the keys inside its first step.
        parallel._broadcast_before_training = lambda mx, trainer: None
    np = __import__("numpy")
    data = dataparallel.load_data(the_plan["data"], the_plan["seed"])
    trainer = parallel._Trainer(the_plan, data)
    params = list(trainer.model.collect_params().values())
    arrays = {"pslite_rank": np.array(trainer.kvstore.rank)}
    snapshot(trainer, params, "init", arrays)
    order = dataparallel.epoch_order(data.train.count, the_plan["seed"], 0)
    batches = list(dataparallel.global_batches(
        order, the_plan["global_batch_size"]))
    losses = []
    for step, batch in enumerate(batches[:steps]):
        local = []
        step_grads(trainer, params, local)
        losses.append(trainer.step(batch))
        snapshot(trainer, params, "step{}".format(step), arrays)
        for i, copy in enumerate(local):
            arrays["step{}.local{}".format(step, i)] = copy.asnumpy()
    arrays["losses"] = np.array(losses)
    np.savez(out, **arrays)
    print("losses", " ".join(repr(l) for l in losses), flush=True)
    return 0


def launch(args, keep, index):
    """(both workers' exit codes, their .npz files)."""
    from harness import threads
    env = dict(os.environ, PYTHONPATH=ROOT)
    threads.apply(1, env)
    outs = [os.path.join(keep, "launch{}-rank{}.npz".format(index, rank))
            for rank in (0, 1)]

    def worker_argv(rank, plan_path):
        return [sys.executable, __file__, "--worker", plan_path, "--steps",
                str(args.steps), "--npz", outs[rank]] + (
                    ["--gluon-init"] if args.gluon_init else [])
    logs = [open(os.path.join(keep, "launch{}-rank{}.log".format(index, r)),
                 "w") for r in (0, 1)]
    try:
        return two_nodes.run(env, keep, index, worker_argv, logs), outs
    finally:
        for log in logs:
            log.close()


def load(path):
    import numpy as np
    with np.load(path) as arrays:
        return dict(arrays.items())


def first_difference(good, bad):
    """(name, relative size of the difference) of the first array, in
    snapshot order, that is not bit-identical; None if all are."""
    import numpy as np
    for name in good:
        if name in ("pslite_rank", "losses"):
            continue
        if name not in bad:
            return name, float("inf")
        a, b = good[name], bad[name]
        if a.shape != b.shape or not np.array_equal(a, b):
            scale = float(np.abs(a).max()) or 1.0
            return name, float(np.abs(a - b).max()) / scale
    return None


def explain(good0, good1, bad, name):
    """What the wrong array's difference from the good one looks like,
    against the arrays of the good launch it could be made of."""
    import numpy as np
    if not name.startswith("step") or ".g" not in name:
        return ""
    step, index = name.split(".g")
    diff = bad[name] - good0[name]
    candidates = {
        "weights before the step": good0[
            ("init" if step == "step0" else
             "step{}".format(int(step[4:]) - 1)) + ".w" + index],
        "the sum again": good0[name],
    }
    lines = ["    |diff| max {:.3g}, |good| max {:.3g}, |bad| max {:.3g}, "
             "nonfinite {}".format(float(np.abs(diff).max()),
                                   float(np.abs(good0[name]).max()),
                                   float(np.abs(bad[name]).max()),
                                   int((~np.isfinite(bad[name])).sum()))]
    for what, value in candidates.items():
        lines.append("    diff vs {}: max |diff - it| {:.3g}, -it {:.3g}"
                     .format(what, float(np.abs(diff - value).max()),
                             float(np.abs(diff + value).max())))
    changed = np.flatnonzero(bad[name].ravel() != good0[name].ravel())
    lines.append("    {} of {} elements differ, first {} last {}".format(
        changed.size, diff.size, changed[:1], changed[-1:]))
    return "\n".join(lines)


def sum_check(got):
    """Lines naming every step and key where the gradient the kvstore
    left is not exactly both nodes' own gradients added."""
    import numpy as np
    lines = []
    for name in sorted(got[0]):
        if ".local" not in name:
            continue
        step, index = name.split(".local")
        pulled = [g[step + ".g" + index] for g in got]
        expected = got[0][name] + got[1][name]
        for r in (0, 1):
            if not np.array_equal(pulled[r], expected):
                lines.append("    {} key {} node{}: pulled != node0 + node1 "
                             "(max |diff| {:.3g}, |local| max {:.3g} / "
                             "{:.3g})".format(
                                 step, index, r,
                                 float(np.abs(pulled[r] - expected).max()),
                                 float(np.abs(got[0][name]).max()),
                                 float(np.abs(got[1][name]).max())))
    return lines


def what_if(paths, target=None):
    """The second iteration's loss (global batch 64, the harness's
    single-node _Trainer as the model) after first updates made of the
    wrong arrays a kvstore mix-up could give, from the arrays of a good
    launch (`--keep DIR`: DIR/launch1-rank0.npz and -rank1.npz): the
    weights W before it, each node's own gradient g0 and g1 (ps-lite
    ranks aside: node0, node1), their sum G."""
    # Why this is long: the cases are one table, each a first update a
    # kvstore mix-up could make, read side by side with its loss.
    import json
    from harness.frameworks import dataparallel
    from harness.frameworks.mxnet import parallel
    got = [load(p) for p in paths]
    the_plan = dict(two_nodes.plan(0, 0), nodes=1, workers=1, workers_per_node=1)
    the_plan.pop("cluster")
    data = dataparallel.load_data(the_plan["data"], the_plan["seed"])
    trainer = parallel._Trainer(the_plan, data)
    mx = trainer.mx
    params = list(trainer.model.collect_params().values())
    keys = range(len(params))
    W = [got[0]["init.w{}".format(i)] for i in keys]
    g = [[n["step0.local{}".format(i)] for i in keys] for n in got]
    G = [got[0]["step0.g{}".format(i)] for i in keys]
    rate = trainer.network.learning_rate / the_plan["global_batch_size"]
    order = dataparallel.epoch_order(data.train.count, the_plan["seed"], 0)
    second = list(dataparallel.global_batches(order, 64))[1]

    def loss(weights):
        for param, value in zip(params, weights):
            param.set_data(mx.nd.array(value))
        x = mx.nd.array(trainer.train_x[second])
        y = mx.nd.array(trainer.train_y[second].astype("float32"))
        return float(trainer.loss(trainer.model(x), y).mean().asscalar())

    def updated(sums):
        return [w - rate * s for w, s in zip(W, sums)]

    def one_key(base, key, value):
        changed = list(base)
        changed[key] = value
        return changed

    cases = [("right: W - lr/64 G", updated(G)),
             ("a node's gradient missing (g0 only)", updated(g[0])),
             ("node 0 counted twice (2 g0 + g1)",
              updated([2 * a + b for a, b in zip(*g)])),
             ("the weights added to the sum (G + W)",
              updated([s + w for s, w in zip(G, W)])),
             ("no 1/64 (64 G)", updated([64 * s for s in G]))]
    for scale in (1000, 1500):
        cases.append(("every key {} G".format(scale),
                      updated([scale * s for s in G])))
    cases.append(("key 6 (last weights) 1400 G",
                  one_key(updated(G), 6, W[6] - rate * 1400 * G[6])))
    for name, value in (("G", G[6]), ("g0", g[0][6]), ("g1", g[1][6])):
        cases.append(("key 6 weights replaced by " + name,
                      one_key(updated(G), 6, value)))
    cases.append(("every key's weights replaced by G", list(G)))
    print(json.dumps({"first_loss_parts": [float(n["losses"][0])
                                           for n in got]}))
    for name, weights in cases:
        print("{:45s} second loss {:.6g}".format(name, loss(weights)),
              flush=True)
    if target is not None:
        closest(target, loss, updated(G), {"G": G, "g0": g[0], "g1": g[1]})
    return 0


def closest(target, loss, right, replacements):
    """Every choice, for the weight matrices and the last bias (keys 0, 2,
    4, 6, 7), between the right update and the weights replaced by one of
    `replacements`: the five whose second loss comes nearest `target`."""
    import itertools
    keys = (0, 2, 4, 6, 7)
    found = []
    for choice in itertools.product([None] + sorted(replacements),
                                    repeat=len(keys)):
        weights = list(right)
        for key, name in zip(keys, choice):
            if name is not None:
                weights[key] = replacements[name][key]
        found.append((abs(loss(weights) - target), choice))
    found.sort(key=lambda f: f[0])
    for distance, choice in found[:5]:
        print("  {:.4g} away: keys {} replaced by {}".format(
            distance, keys, ["right" if c is None else c for c in choice]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--what-if", nargs=2, metavar="NPZ")
    parser.add_argument("--gluon-init", action="store_true")
    parser.add_argument("--closest-to", type=float)
    parser.add_argument("--worker")
    parser.add_argument("--npz")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--launches", type=int, default=40)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--keep")
    args = parser.parse_args()
    if args.what_if:
        return what_if(args.what_if, args.closest_to)
    if args.worker:
        return worker(args.worker, args.steps, args.npz, args.gluon_init)
    keep = args.keep or tempfile.mkdtemp(prefix="mxnet-first-update-")
    os.makedirs(keep, exist_ok=True)
    reference, bad = None, 0
    for index in range(1, args.launches + 1):
        (codes, outs), wall = two_nodes.loaded(
            args.load, lambda: launch(args, keep, index))
        if codes != [0, 0]:
            bad += 1
            print("launch {}: exit {} ({:.1f} s)".format(index, codes, wall),
                  flush=True)
            continue
        got = [load(o) for o in outs]
        losses = " / ".join(" ".join("{:.6g}".format(v) for v in g["losses"])
                            for g in got)
        ranks = [int(g["pslite_rank"]) for g in got]
        if reference is None:
            reference = got
        found = [first_difference(r, g) for r, g in zip(reference, got)]
        if any(found):
            bad += 1
        print("launch {}: ps-lite ranks {} losses {} ({:.1f} s) {}".format(
            index, ranks, losses, wall,
            "identical" if not any(found) else "DIFFERS: " + ", ".join(
                "node{} {} {:.3g}".format(r, f[0], f[1])
                for r, f in enumerate(found) if f)), flush=True)
        for line in sum_check(got):
            print(line, flush=True)
        for r, f in enumerate(found):
            if f:
                print(explain(reference[r], reference[1 - r], got[r], f[0]),
                      flush=True)
        if not any(found) and index > 1:
            for o in outs:
                os.remove(o)
    print("{} of {} launches differ from launch 1 (arrays in {})".format(
        bad, args.launches, keep))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
