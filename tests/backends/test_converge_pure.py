"""Convergence mode's pure parts: figures, sample order, curves written as
they grow, spec and plan validation. Real training is
tests/backends/test_converge_training.py; stopped and failing runs
tests/backends/test_converge_faults.py."""
import json

import pytest

from convergeenv import GPU_MATRIX, _plan
from dlrepro.converge import plan as conv_plan
from dlrepro.converge import runner as conv
from dlrepro.run import runtimes
from dlrepro.errors import UserError
from harness import spec as hspec
from harness import figures
from harness.errors import HarnessError
from harness.frameworks import dataparallel as common

PER_EPOCH = [
    {"epoch": 1, "train_loss": 2.0, "train_s": 10.0},
    {"epoch": 2, "train_loss": 1.2, "train_s": 11.0},
    {"epoch": 3, "train_loss": 0.9, "train_s": 12.0},
]


def test_figures_of_one_run():
    assert figures.epochs_to_target(PER_EPOCH, 1.2) == 2
    assert figures.seconds_to_target(PER_EPOCH, 1.2) == 21.0
    assert figures.epochs_to_target(PER_EPOCH, 0.5) is None
    assert figures.seconds_to_target(PER_EPOCH, 0.5) is None
    nan_first = [dict(PER_EPOCH[0], train_loss=float("nan"))] + PER_EPOCH[1:]
    assert figures.epochs_to_target(nan_first, 5.0) == 2
    run = figures.run_figures(PER_EPOCH, 0.25, 1.0)
    assert run == {"target_loss": 1.0, "epochs_to_target": 3,
                   "seconds_to_target": 33.0, "final_train_loss": 0.9,
                   "final_test_loss": None, "final_test_accuracy": None,
                   "training_s": 33.0, "processing_time_s": 0.25}


def test_figures_across_worker_counts():
    two = [{"epoch": 1, "train_loss": 2.1, "train_s": 6.0},
           {"epoch": 2, "train_loss": 1.5, "train_s": 6.0},
           {"epoch": 3, "train_loss": 1.1, "train_s": 6.0}]
    compared = figures.compare([
        {"workers": 2, "per_epoch": two, "processing_time_s": 0.15},
        {"workers": 1, "per_epoch": PER_EPOCH, "processing_time_s": 0.25}])
    # Default target: the highest final loss, 1.1, reached by both.
    assert compared["target_loss"] == 1.1
    one, pair = compared["rows"]
    assert (one["workers"], one["epochs_to_target"],
            one["seconds_to_target"]) == (1, 3, 33.0)
    assert (pair["workers"], pair["epochs_to_target"],
            pair["seconds_to_target"]) == (2, 3, 18.0)
    assert pair["epochs_ratio"] == 1.0
    assert pair["seconds_ratio"] == pytest.approx(18.0 / 33.0)
    assert pair["speedup"] == pytest.approx(0.25 / 0.15)
    assert pair["scaling_efficiency"] == pytest.approx(0.25 / 0.15 / 2)
    assert one["speedup"] == 1.0 and one["scaling_efficiency"] == 1.0
    given = figures.compare([{"workers": 2, "per_epoch": two,
                              "processing_time_s": 0.15}], 1.5)
    assert given["target_source"] == "given"
    assert given["rows"][0]["epochs_to_target"] == 2
    assert given["rows"][0]["speedup"] is None  # no 1-worker run


def test_workers_see_the_global_batches_of_one_worker():
    order = common.epoch_order(10, seed=3, epoch=1)
    assert sorted(order) == list(range(10))
    assert order == common.epoch_order(10, 3, 1)
    assert order != common.epoch_order(10, 3, 2)
    batches = common.global_batches(order, 4)
    assert batches == [order[0:4], order[4:8]]  # the remainder is dropped
    for batch in batches:
        assert common.shard(batch, 0, 2) + common.shard(batch, 1, 2) == batch
        assert sum((common.shard(batch, r, 4) for r in range(4)), []) == batch


class _Clock(object):
    """A clock that advances only when told: each step takes 1 s, each
    write of the curves 0.5 s, evaluation 2 s."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _PartTrainer(common.Trainer):
    """Steps return this worker's part's loss (reduced at the epoch's end,
    as PyTorch does); the step `fail_at` (0-based over the run) raises."""

    def __init__(self, clock, fail_at=None):
        self.clock, self.fail_at, self.steps = clock, fail_at, 0

    def step(self, batch):
        if self.steps == self.fail_at:
            raise RuntimeError("Connection reset by peer")
        self.steps += 1
        self.clock.now += 1.0
        return float(self.steps)

    def global_losses(self, losses):
        return [v / 10 for v in losses]

    def part_losses(self, losses):
        return list(losses), "part"

    def evaluate(self):
        self.clock.now += 2.0
        return 1.0, 0.5


def test_the_progress_interval_of_launched_workers_can_be_set():
    assert common.progress_every_s({}) == common.PROGRESS_EVERY_S
    assert common.progress_every_s({common.PROGRESS_ENV: "0"}) == 0.0
    with pytest.raises(HarnessError, match="^DLREPRO_PROGRESS_EVERY_S must "
                       "be a number of seconds >= 0, got 'soon'$"):
        common.progress_every_s({common.PROGRESS_ENV: "soon"})
    plan = {"node_rank": 0}
    assert common.worker_progress("c.json", plan, environ={
        common.PROGRESS_ENV: "0"}).due(0.0)


class _SlowProgress(common.Progress):
    """Records its snapshots; each write takes 0.5 s of the clock."""

    def __init__(self, clock, every_s):
        super(_SlowProgress, self).__init__("unused", every_s=every_s)
        self.clock, self.written = clock, []

    def write(self, snapshot, now=None):
        if now is not None:
            self.last = now
        self.clock.now += 0.5
        self.written.append(json.loads(json.dumps(snapshot)))


PLAN = {"workers": 2, "global_batch_size": 2, "epochs": 3, "seed": 1}


def test_curves_are_written_as_they_grow_outside_the_timed_iterations():
    """Every epoch's end and, within an epoch, every `every_s`: the writes
    take clock time but no iteration's time holds any of it."""
    clock = _Clock()
    progress = _SlowProgress(clock, every_s=2.5)
    curves = common.run_epochs(_PartTrainer(clock), PLAN, 8, clock=clock,
                               progress=progress)
    assert curves["iteration_s"] == [1.0] * 12
    assert [e["train_s"] for e in curves["epochs"]] == [4.0, 4.0, 4.0]
    ends = [w for w in progress.written if w["in_progress"] is None]
    assert [len(w["epochs"]) for w in ends] == [1, 2, 3]
    within = [w["in_progress"] for w in progress.written if w["in_progress"]]
    assert within[0] == {"epoch": 1, "seconds": [1.0, 1.0, 1.0],
                         "loss": [1.0, 2.0, 3.0], "loss_of": "part"}
    assert all(w["loss_of"] == "part" for w in within)
    assert all(not w["finished"] for w in progress.written)


def test_an_exception_carries_the_curves_measured_so_far():
    """A lost peer in epoch 2: epoch 1 whole, epoch 2's first iteration
    with its part's loss; the progress file gets the same snapshot."""
    clock = _Clock()
    progress = _SlowProgress(clock, every_s=1000)
    with pytest.raises(RuntimeError) as raised:
        common.run_epochs(_PartTrainer(clock, fail_at=5), PLAN, 8,
                          clock=clock, progress=progress)
    partial = raised.value.partial_curves
    assert partial["finished"] is False
    assert partial["iteration_loss"] == [0.1, 0.2, 0.3, 0.4]
    assert partial["iteration_s"] == [1.0] * 4
    assert [e["epoch"] for e in partial["epochs"]] == [1]
    assert partial["in_progress"] == {"epoch": 2, "seconds": [1.0],
                                      "loss": [5.0], "loss_of": "part"}
    assert progress.written[-1] == partial
    # Steps that return the global loss already: "global".
    with pytest.raises(RuntimeError) as raised:
        common.run_epochs(_GlobalTrainer(_Clock(), fail_at=6), PLAN, 8,
                          clock=_Clock())
    assert raised.value.partial_curves["in_progress"]["loss_of"] == "global"


class _GlobalTrainer(_PartTrainer):
    global_losses = common.Trainer.global_losses
    part_losses = common.Trainer.part_losses


def test_spec_errors_are_clear():
    spec = {"framework": "pytorch", "profile": "cpu", "network": "fcn-r",
            "device": "cpu", "workers": 4, "global_batch_size": 2,
            "epochs": 1, "seed": 0, "threads": None, "runtime": "native",
            "clock_policy": "observe", "target_loss": None,
            "data": {"source": "synthetic"}}
    with pytest.raises(HarnessError, match="^4 workers cannot share a global "
                       "batch of 2 samples: each worker needs at least one$"):
        hspec.validate_convergence(spec)
    with pytest.raises(HarnessError, match="^a global batch of 6 does not "
                       "split evenly over 4 workers; use a multiple of 4$"):
        hspec.validate_convergence(dict(spec, global_batch_size=6))
    with pytest.raises(HarnessError, match="fcn5 trains on synthetic data "
                       "only; convergence networks: alexnet-r, fcn-r, lstm, "
                       "resnet-56"):
        hspec.validate_convergence(dict(spec, network="fcn5", global_batch_size=8))
    with pytest.raises(HarnessError, match="unknown framework 'theano'"):
        hspec.validate_convergence(dict(spec, framework="theano"))
    with pytest.raises(HarnessError, match="missing \\['epochs'\\]"):
        hspec.validate_convergence(dict((k, v) for k, v in spec.items()
                                if k != "epochs"))
    with pytest.raises(HarnessError, match="target_loss must be a positive"):
        hspec.validate_convergence(dict(spec, global_batch_size=8, target_loss=-1))
    with pytest.raises(HarnessError, match="convergence runs observe GPU "
                       "clocks only; clock_policy 'lock=1410'"):
        hspec.validate_convergence(dict(spec, global_batch_size=8,
                                clock_policy="lock=1410"))
    with pytest.raises(HarnessError, match="global batch \\(64\\) is larger "
                       "than the 10 training samples"):
        common.check_plan(dict(spec, global_batch_size=64), 10)



def test_plan_defaults_follow_the_paper(tmp_path):
    specs = _plan(["pytorch"], ["fcn-r", "alexnet-r"], [1, 2, 4],
                  synthetic=True)
    assert [(s["network"], s["workers"], s["global_batch_size"], s["epochs"])
            for s in specs] == [
        ("fcn-r", 1, 1024, 40), ("fcn-r", 2, 1024, 40), ("fcn-r", 4, 1024, 40),
        ("alexnet-r", 1, 1024, 40), ("alexnet-r", 2, 1024, 40),
        ("alexnet-r", 4, 1024, 40)]
    gpu = _plan(["pytorch"], ["fcn-r", "lstm"], [1, 2, 4], device="gpu",
                synthetic=True, matrix=GPU_MATRIX)
    assert [(s["global_batch_size"], s["epochs"], s["profile"], s["device"])
            for s in gpu][::3] == [(4096, 40, "cuda", "gpu"),
                                   (128, 20, "cuda", "gpu")]
    data = _plan(["pytorch"], ["fcn-r"], [1], data_dir=tmp_path)[0]["data"]
    assert data == {"source": "files", "name": "mnist",
                    "dir": str(tmp_path.resolve()), "checksums": None,
                    "train_samples": None, "test_samples": None}


@pytest.mark.parametrize("kwargs,message", [
    ({"workers": [1, 3]}, "a global batch of 1024 does not split evenly over 3"),
    ({"global_batch": "0"}, "--global-batch-size must be an integer >= 1"),
    ({"networks": ["fcn5"]}, "unknown convergence network 'fcn5'"),
    ({"frameworks": ["theano"]}, "unknown framework 'theano'"),
    ({"synthetic": True, "data_dir": "x"}, "exclude each other"),
    ({"target_loss": "low"}, "--target-loss must be a number"),
    ({"seed": "abc"}, "--seed must be an integer >= 0, got 'abc'"),
])
def test_plan_errors(kwargs, message):
    args = {"frameworks": ["pytorch"], "networks": ["fcn-r"],
            "workers": [1, 2]}
    args.update(kwargs)
    with pytest.raises(UserError, match=message):
        conv_plan.plan(args.pop("frameworks"), args.pop("networks"),
                       args.pop("workers"), **args)


def test_worker_counts():
    assert conv_plan.worker_counts("4,1,2,2", "--workers") == (1, 2, 4)
    with pytest.raises(UserError, match="--gpus must be an integer >= 1, "
                                        "got 'two'"):
        conv_plan.worker_counts("1,two", "--gpus")


def test_resume_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no convergence run under .* to "
                                        "resume"):
        conv.run([], tmp_path, runtimes.get("native"), resume=True)
