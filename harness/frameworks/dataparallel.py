"""What every framework's data-parallel training shares: the sample order,
how a global batch is split over workers, the epoch loop with its clocks,
and the curves it returns. Standard library only.

Same seed, same order: the permutation of an epoch depends on the seed and
the epoch alone, global batch k of an epoch is the k-th slice of that
permutation (the incomplete last batch is dropped), and worker r trains on
the r-th contiguous part of it. One worker therefore sees exactly the
batches that N workers see together, so with gradients averaged over the
global batch (every framework's update is the gradient of the global
batch's mean loss, as with one worker) the runs differ only by
floating-point reduction order.
"""
import argparse
import functools
import json
import math
import os
import random
import signal
import sys
import tempfile
import time

from .. import networks, resultfile
from . import children
from ..data import datasets
from ..errors import HarnessError, Terminated
from ..timing import say_when_first

# The folder that holds the harness package: worker processes import it.
HARNESS_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def epoch_order(count, seed, epoch):
    """The order of the training samples in `epoch` (0-based)."""
    order = list(range(count))
    random.Random(seed * 1000003 + epoch).shuffle(order)
    return order


def global_batches(order, global_batch):
    """Complete global batches of `order`; the remainder is dropped."""
    return [order[i:i + global_batch]
            for i in range(0, len(order) - global_batch + 1, global_batch)]


def shard(batch, rank, workers):
    """Worker `rank`'s contiguous part of a global batch."""
    per_worker = len(batch) // workers
    return batch[rank * per_worker:(rank + 1) * per_worker]


def iterations_per_epoch(train_count, global_batch):
    return train_count // global_batch


def threads_per_worker(threads, workers):
    """Intra-op threads for each worker process: the cell's total shared
    out, so that N workers do not oversubscribe the cores."""
    return max(1, threads // workers)


def load_data(spec, seed):
    """The dataset a plan names: real files (verified) or synthetic."""
    if spec["source"] == "synthetic":
        return datasets.synthetic(spec["name"], seed, spec.get("train_samples"),
                                  spec.get("test_samples"))
    return datasets.load(spec["name"], spec["dir"], spec.get("checksums"),
                         spec.get("train_samples"), spec.get("test_samples"))


def new_curves():
    return {"iteration_loss": [], "iteration_s": [], "epochs": [],
            "diverged_at": None}


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))


class Trainer(object):
    """What every framework's trainer takes from the plan: its backend, the
    network, the workers and the global batch. global_losses() returns the
    losses as they are, for steps that already return the global batch's
    loss; a trainer whose workers each see their own part overrides it, and
    part_losses() too."""

    def __init__(self, plan, backend):
        self.backend = backend
        self.network = networks.get(plan["network"])
        self.workers = plan["workers"]
        self.global_batch = plan["global_batch_size"]

    def global_losses(self, losses):
        return losses

    def part_losses(self, losses):
        """The losses step() returned in an epoch whose global losses are
        not reduced yet, as (values, "global" or "part"): "part" is the mean
        loss of this process's part of each global batch."""
        return list(losses), "global"


# How often the rank that writes the curves writes them within an epoch
# (besides every epoch's end), between two iterations. PROGRESS_ENV sets
# another interval for launched workers: 0 writes after every iteration,
# for tests that must see an epoch under way however fast the machine.
PROGRESS_EVERY_S = 5.0
PROGRESS_ENV = "DLREPRO_PROGRESS_EVERY_S"


class Progress(object):
    """The curves as they grow, for a run cut short (docs/convergence.md,
    "A run cut short keeps what it measured").

    run_epochs() calls write() at every epoch's end (after evaluation,
    before the next epoch's clock starts) and, where `mid_epoch`, between
    two iterations once `every_s` have passed since the last write; the
    clock is read again after such a write, so the write lies outside every
    iteration's time. `path` None: nothing is written (in-process trainers,
    ranks that do not write the curves); the snapshot of an exception is
    still attached to it (`partial_curves`) for the convergence process.
    A write that fails is reported once on stderr and training goes on."""

    def __init__(self, path=None, mid_epoch=True, every_s=PROGRESS_EVERY_S):
        self.path = path
        self.mid_epoch = bool(path) and mid_epoch
        self.every_s = every_s
        self.last = None
        self.failed = False

    def due(self, now):
        if not self.mid_epoch:
            return False
        if self.last is None:
            self.last = now
        return now - self.last >= self.every_s

    def write(self, snapshot, now=None):
        if now is not None:
            self.last = now
        if not self.path:
            return
        try:
            resultfile.write_atomic(self.path, resultfile.json_safe(snapshot))
        except (OSError, ValueError) as exc:
            if not self.failed:
                sys.stderr.write("harness: the curves so far could not be "
                                 "written to {}: {}\n".format(self.path, exc))
                self.failed = True


def snapshot(curves, completed, epoch, local, trainer):
    """The curves of a run in progress: the epochs completed (their
    iterations: the first `completed` of curves) and the epoch in progress
    (1-based `epoch`) with its iterations' times and losses, global where
    they are known (the epoch's global losses reduced), else this process's
    part's (trainer.part_losses)."""
    seconds = curves["iteration_s"][completed:]
    current = None
    if seconds:
        known = curves["iteration_loss"][completed:]
        if len(known) >= len(seconds):
            losses, loss_of = list(known[:len(seconds)]), "global"
        else:
            losses, loss_of = trainer.part_losses(local[:len(seconds)])
        current = {"epoch": epoch, "seconds": list(seconds),
                   "loss": list(losses), "loss_of": loss_of}
    return {"iteration_loss": list(curves["iteration_loss"][:completed]),
            "iteration_s": list(curves["iteration_s"][:completed]),
            "epochs": list(curves["epochs"]),
            "diverged_at": curves.get("diverged_at"),
            "finished": False, "in_progress": current}


def run_epochs(trainer, plan, train_count, curves=None,
               clock=time.perf_counter, progress=None):
    """Train plan["epochs"] epochs through `trainer` and fill `curves`.
    Why this is long: one loop with its clocks, its progress writes and its
    exits (divergence, an exception's partial curves) in one place, where a
    reader checks that no write or evaluation is timed.

    `trainer` has step(indices) -> the loss of this worker's part (a float
    read back once the device has finished), global_losses(losses) -> the
    global batch's loss per iteration (the mean over workers; identical on
    every worker) and evaluate() -> (test loss, test accuracy). Iteration
    time is the interval between the ends of consecutive iterations, as in
    the throughput harness; evaluation lies outside it, and so does writing
    the curves so far (`progress`, a Progress: the clock is read again
    after a write, and the epoch's train_s leaves the writes out). A
    non-finite loss stops training at the end of its epoch: workers decide
    together on the combined losses, so none waits forever for the others.

    An exception (a lost peer, SIGTERM turned into one) carries the curves
    measured until then as its `partial_curves` (snapshot()), also written
    to the progress file.
    """
    curves = new_curves() if curves is None else curves
    progress = Progress() if progress is None else progress
    workers, global_batch = plan["workers"], plan["global_batch_size"]
    completed, epoch, local = 0, 0, []
    if progress.last is None:
        progress.last = clock()
    try:
        for epoch in range(plan["epochs"]):
            order = epoch_order(train_count, plan["seed"], epoch)
            local = []
            paused = 0.0
            start = previous = clock()
            for batch in global_batches(order, global_batch):
                loss = trainer.step(batch)
                now = clock()
                curves["iteration_s"].append(now - previous)
                previous = now
                if say_when_first(len(curves["iteration_s"])):
                    # The line is no part of the next iteration.
                    previous = clock()
                    paused += previous - now
                local.append(loss)
                if progress.due(now):
                    progress.write(snapshot(curves, completed, epoch + 1,
                                            local, trainer), now)
                    # The write is no part of the next iteration.
                    previous = clock()
                    paused += previous - now
            train_s = previous - start - paused
            losses = trainer.global_losses(local)
            first = len(curves["iteration_loss"])
            curves["iteration_loss"].extend(losses)
            bad = [i for i, v in enumerate(losses) if not _finite(v)]
            if bad:
                curves["diverged_at"] = first + bad[0]
            before = clock()
            test_loss, test_accuracy = trainer.evaluate()
            curves["epochs"].append({
                "epoch": epoch + 1,
                "iterations": len(losses),
                "train_loss": math.fsum(losses) / len(losses) if not bad else
                float("nan"),
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
                "train_s": train_s,
                "eval_s": clock() - before,
            })
            completed = len(curves["iteration_s"])
            local = []
            # Outside the timed loop: the next epoch's clock starts after.
            progress.write(snapshot(curves, completed, epoch + 2, local,
                                    trainer), clock())
            if bad:
                break
    except BaseException as exc:
        partial = snapshot(curves, completed, epoch + 1, local, trainer)
        progress.write(partial)
        try:
            exc.partial_curves = partial
        except (AttributeError, TypeError):
            pass
        raise
    return curves


def check_plan(plan, train_count):
    """Errors a plan can have only once the data is known."""
    per_epoch = iterations_per_epoch(train_count, plan["global_batch_size"])
    if per_epoch < 1:
        raise HarnessError("the global batch ({}) is larger than the {} "
                           "training samples: no complete batch per epoch".format(
                               plan["global_batch_size"], train_count))
    if per_epoch * plan["epochs"] < 2:
        raise HarnessError("a convergence run needs at least 2 iterations; "
                           "{} epoch(s) of {} give {}".format(
                               plan["epochs"], per_epoch,
                               per_epoch * plan["epochs"]))
    return per_epoch


def finish(curves, trainer, plan):
    """`curves` with what the result records of the framework: the trainer's
    parameter count, its backend's versions and thread count."""
    curves["framework_parameters"] = trainer.parameters
    curves["versions"] = trainer.backend.versions(plan["device"])
    curves["framework_threads"] = trainer.backend.effective_threads()
    return curves


def train_here(trainer, plan, data):
    """The curves of a trainer whose workers all live in this process (an
    exception carries the curves so far: run_epochs)."""
    return finish(run_epochs(trainer, plan, data.train.count), trainer, plan)


# --- frameworks with one process per worker, started by a launcher ---------

def worker_env(plan):
    """The environment of a launcher's workers: the harness importable, and
    the plan's threads for each of them."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HARNESS_PARENT] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
    env["OMP_NUM_THREADS"] = str(plan["threads"])
    env[children.HARNESS_PID_ENV] = str(os.getpid())
    return env


def launch(plan, log, command, run, prefix="dlrepro-workers-"):
    """Rank 0's curves from workers started by `run(command, env)`: the plan
    goes to a temporary file and the workers, given `--plan PLAN --out
    CURVES` after `command`, write the curves there (see worker_main), as
    they grow (run_epochs' Progress) and finished at the end. When `run`
    raises (the launcher failed, SIGTERM), the exception carries what the
    workers had written as its `partial_curves`."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        out_path = os.path.join(tmp, "curves.json")
        resultfile.write_atomic(plan_path, plan)
        command = command + ["--plan", plan_path, "--out", out_path]
        log("launching: {}".format(" ".join(command)))
        try:
            run(command, worker_env(plan))
        except BaseException as exc:
            partial = read_partial(out_path)
            if partial is not None:
                exc.partial_curves = partial
            raise
        with open(out_path) as handle:
            return json.load(handle)


def read_partial(path):
    """The curves a worker wrote so far, or None (none written, or not
    readable: writes are atomic, so a file is whole or absent)."""
    try:
        with open(path) as handle:
            curves = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(curves, dict):
        return None
    # A worker that finished and a launcher that failed after it: the
    # curves are whole ("finished" true), the run still an error.
    curves.setdefault("finished", False)
    return curves


def write_curves(out_path, curves, trainer, plan):
    """Rank 0's part: the finished curves where launch() reads them."""
    curves = dict(finish(curves, trainer, plan), finished=True,
                  in_progress=None)
    resultfile.write_atomic(out_path, resultfile.json_safe(curves))


def worker_progress(out_path, plan, writes=True, environ=None):
    """The Progress of a launched worker: the rank that writes the curves
    (`writes`) writes them as they grow; mid-epoch only on node 0 (another
    node's write between iterations would stall node 0's next one)."""
    return Progress(out_path if writes else None,
                    mid_epoch=plan.get("node_rank", 0) == 0,
                    every_s=progress_every_s(environ))


def progress_every_s(environ=None):
    """PROGRESS_ENV's interval, else PROGRESS_EVERY_S."""
    environ = os.environ if environ is None else environ
    given = environ.get(PROGRESS_ENV)
    if given is None:
        return PROGRESS_EVERY_S
    try:
        every_s = float(given)
    except ValueError:
        every_s = -1.0
    if not every_s >= 0:
        raise HarnessError("{} must be a number of seconds >= 0, got "
                           "{!r}".format(PROGRESS_ENV, given))
    return every_s


def train_worker(make_trainer, plan, out_path):
    """A launched worker that writes its node's curves: make_trainer(plan,
    data) trained on the plan's data, the curves written as they grow and
    when done."""
    data = load_data(plan["data"], plan["seed"])
    trainer = make_trainer(plan, data)
    curves = run_epochs(trainer, plan, data.train.count,
                        progress=worker_progress(out_path, plan))
    write_curves(out_path, curves, trainer, plan)


def _terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("terminated by signal {}".format(signum))


def trainer_main(module, make_trainer, argv=None):
    """worker_main of a module whose worker is train_worker(make_trainer)."""
    return worker_main(module, functools.partial(train_worker, make_trainer),
                       argv)


def worker_main(module, worker, argv=None):
    """The command line of a worker module (`python -m MODULE --plan PLAN
    --out CURVES`, under a launcher only): worker(plan, out_path); a
    HarnessError is exit status 2."""
    parser = argparse.ArgumentParser(prog="python -m " + module)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    # SIGTERM (the launcher stopping its workers) as an exception: the
    # epoch loop writes the curves so far before the worker ends.
    signal.signal(signal.SIGTERM, _terminated)
    children.stay_with_launcher()
    try:
        with open(args.plan) as handle:
            plan = json.load(handle)
        worker(plan, args.out)
    except HarnessError as exc:
        sys.stderr.write("harness: error: {}\n".format(exc))
        return 2
    return 0
