"""Convergence mode: figures, sample order, validation, and real data-parallel
training (1 vs 2 workers) in each framework's own environment on small
generated MNIST files.
Why this is long: the figures, the plan and the harness's checks are quick
unit tests; the real training runs share one module-scoped fixture."""
import importlib.util
import json
import math
import xml.etree.ElementTree as ET
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

import processes
import waits
from dlrepro.converge import datasets as dd
from dlrepro.converge import plan as conv_plan
from dlrepro.converge import runner as conv
from dlrepro.converge import summary as conv_summary
from dlrepro.run import runtimes, store
from dlrepro.run.engines.local import LocalEngine
from dlrepro.errors import UserError
from harness import spec as hspec
from harness import figures, resultfile
from harness.errors import HarnessError
from harness.frameworks import dataparallel as common
from paths import ROOT

# Data parallelism reuses each backend's build_model: a framework is tested
# here once its backend is in the tree. CNTK trains in its image, under the
# image's mpirun (tests/cntkenv.py).
FRAMEWORKS = [f for f in ("pytorch", "tensorflow", "mxnet", "cntk", "jax")
              if (ROOT / "harness" / "frameworks" / f / "backend.py").exists()]
# 1 vs 2 workers: the same global batches, gradients averaged over the
# global batch, so the curves differ only by float32 reduction order
# (observed: below 1e-5 over 32 iterations). 1e-3 of the loss is 100x that,
# and 100x below what a real fault moves the curve by: a different seed
# (checked below), a doubled learning rate (gradients summed instead of
# averaged) or workers training on the same half of the batch all change the
# loss by 0.05 or more within a few iterations.
RELATIVE_TOLERANCE = 1e-3
TRAIN, TEST, BATCH, EPOCHS = 1024, 256, 64, 2


# --- pure parts -----------------------------------------------------------------

# The GPU profiles live in the matrix of the GPU work; the plan only needs to
# find one.
GPU_MATRIX = {"pytorch": {"cpu": {"device": "cpu"}, "cuda": {"device": "gpu"}}}

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


def _plan(*args, **kwargs):
    """The specs of a convergence plan."""
    return [job.spec for job in conv_plan.plan(*args, **kwargs)]


def _native(python):
    return runtimes.get("native", python=str(python))


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


# --- real training --------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return folder, dd.generate("mnist", folder, TRAIN, TEST, seed=11)


def _jobs(framework, data_dir, checksums, workers, seed=5, epochs=EPOCHS):
    return conv_plan.plan([framework], ["fcn-r"], workers, global_batch=BATCH,
                          epochs=epochs, seed=seed, threads=2,
                          data_dir=data_dir, checksums=checksums,
                          runtime="native", timeout=900)


def _max_relative(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def trained(request, mnist, tmp_path_factory, framework_python):
    """1 and 2 workers of one framework, run through dlrepro.converge.runner."""
    framework = request.param
    data_dir, checksums = mnist
    out = tmp_path_factory.mktemp("results")
    jobs = _jobs(framework, data_dir, checksums, [1, 2])
    conv_plan.check_data(jobs, log=lambda m: None)
    runtime = _native(framework_python(framework))
    run_dir, results = conv.run(jobs, out, runtime)
    return framework, run_dir, results, runtime


def test_one_and_two_workers_converge_alike(trained, schema):
    framework, run_dir, results, _ = trained
    one = results[f"{framework}-fcn-r-w1"]
    two = results[f"{framework}-fcn-r-w2"]
    per_epoch = TRAIN // BATCH
    for result in (one, two):
        jsonschema.validate(result, schema)
        assert result["status"] == "ok", result["error"]
        block = result["convergence"]
        curve = block["curve"]["loss"]
        assert len(curve) == len(block["curve"]["seconds"]) == \
            per_epoch * EPOCHS
        assert all(math.isfinite(v) for v in curve)
        assert result["cell"]["iterations"] == per_epoch * EPOCHS - 1
        assert result["loss"]["warmup"] + result["loss"]["per_iteration"] == \
            curve
        assert result["cell"]["dataset"] == block["data"]["label"]
        assert result["cell"]["dataset"].startswith("mnist-custom sha256:")
        assert [e["epoch"] for e in block["per_epoch"]] == [1, 2]
        first, last = block["per_epoch"]
        # The loss falls: lower over the second epoch than over the first,
        # and the last iteration below the first epoch's peak.
        assert last["train_loss"] < first["train_loss"]
        assert curve[-1] < max(curve[:per_epoch])
        assert first["train_loss"] == pytest.approx(
            math.fsum(curve[:per_epoch]) / per_epoch)
        assert 0.0 <= last["test_accuracy"] <= 1.0
        assert block["final_train_loss"] == last["train_loss"]
        assert block["training_s"] == pytest.approx(
            first["train_s"] + last["train_s"])
        assert block["processing_time_s"] == result["timing"]["mean_s"]
        assert result["model"]["framework_parameters"] == \
            result["model"]["parameters"]
    assert one["convergence"]["parallel_note"] is None
    assert "mean little" in two["convergence"]["parallel_note"]
    assert (one["cell"]["batch_size"], two["cell"]["batch_size"]) == \
        (BATCH, BATCH // 2)
    a, b = one["convergence"]["curve"]["loss"], \
        two["convergence"]["curve"]["loss"]
    assert _max_relative(a, b) <= RELATIVE_TOLERANCE, (a, b)
    accuracy = [r["convergence"]["final_test_accuracy"] for r in (one, two)]
    assert accuracy[0] == pytest.approx(accuracy[1], abs=2.0 / TEST)


def test_run_folder_records_and_compares(trained):
    framework, run_dir, results, _ = trained
    record = json.loads((run_dir / "run.json").read_text())
    assert record["kind"] == "converge" and record["finished_at"]
    assert record["schema_version"] == store.RUN_SCHEMA_VERSION
    assert [(r["id"], r["status"]) for r in record["jobs"]] == [
        (f"{framework}-fcn-r-w1", "ok"), (f"{framework}-fcn-r-w2", "ok")]
    assert (run_dir.parent / "latest-converge").resolve() == run_dir.resolve()
    assert conv.latest_run(run_dir.parent) == run_dir.resolve()
    summary = json.loads((run_dir / "convergence.json").read_text())
    (comparison,) = summary["comparisons"]
    one, two = comparison["rows"]
    finals = [results[f"{framework}-fcn-r-w{n}"]["convergence"]
              ["final_train_loss"] for n in (1, 2)]
    assert comparison["target_loss"] == max(finals)
    assert one["epochs_to_target"] <= EPOCHS and two["epochs_to_target"] <= \
        EPOCHS
    assert two["speedup"] == pytest.approx(
        one["processing_time_s"] / two["processing_time_s"])
    assert two["scaling_efficiency"] == pytest.approx(two["speedup"] / 2)
    assert two["epochs_ratio"] == two["epochs_to_target"] / \
        one["epochs_to_target"]
    lines = conv_summary.table_lines(summary)
    assert lines[0].startswith(f"{framework} fcn-r on cpu, global batch 64, "
                               f"2 epochs, seed 5, data mnist-custom sha256:")
    assert any(line.split()[:2] == ["2", "ok"] for line in lines)


def test_report_prints_figures_and_plots_curves(trained, tmp_path, capsys):
    framework, run_dir, results, _ = trained
    spec = importlib.util.spec_from_file_location(
        "convergence_report", ROOT / "benchmarks" / "convergence_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    svg = tmp_path / "curves.svg"
    module.report(run_dir, [svg])
    printed = capsys.readouterr().out
    assert printed.startswith(f"{framework} fcn-r on cpu, global batch 64")
    assert f"plot: {svg}" in printed
    root = ET.parse(svg).getroot()
    curves = sorted(g.get("id") for g in root.iter("{http://www.w3.org/2000/"
                                                   "svg}g")
                    if (g.get("id") or "").startswith("curve-"))
    # Two panels (against epochs, against seconds) x two worker counts,
    # each a drawn path.
    assert curves == [f"curve-{framework}-fcn-r-w{n}-{axis}"
                      for n in (1, 2) for axis in ("epochs", "seconds")]
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        if (group.get("id") or "").startswith("curve-"):
            assert group.find("{http://www.w3.org/2000/svg}path").get("d")


@pytest.mark.parametrize("trained", ["pytorch"], indirect=True)
def test_another_seed_moves_the_curve_beyond_the_tolerance(trained, mnist,
                                                           tmp_path):
    """The tolerance above can fail: a real difference exceeds it (shown in
    one framework: the argument does not depend on it)."""
    framework, run_dir, results, runtime = trained
    data_dir, checksums = mnist
    jobs = _jobs(framework, data_dir, checksums, [1], seed=6, epochs=1)
    _, other = conv.run(jobs, tmp_path, runtime)
    moved = other[f"{framework}-fcn-r-w1"]["convergence"]["curve"]["loss"]
    base = results[f"{framework}-fcn-r-w1"]["convergence"]["curve"]["loss"]
    assert _max_relative(base, moved) > 10 * RELATIVE_TOLERANCE


def _harness(python, root, spec, out):
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps({"convergence": spec, "container": None}))
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([str(python), "-s", "-m", "harness", "converge",
                           "--spec", str(spec_path), "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True)


def test_missing_gpus_are_unsupported(root, tmp_path, framework_python,
                                      schema):
    spec = _plan(["pytorch"], ["fcn-r"], [2], device="gpu",
                 global_batch=8, epochs=1, synthetic=True,
                 train_samples=64, test_samples=16, matrix=GPU_MATRIX)[0]
    out = tmp_path / "gpu.json"
    proc = _harness(framework_python("pytorch"), root, spec, out)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema)
    assert result["status"] == "unsupported"
    assert result["error"]["message"] == \
        "2 GPUs asked for, pytorch sees 0 on this machine"
    assert result["cell"]["dataset"] == "synthetic"
    assert result["convergence"]["data"]["source"] == "synthetic"
    assert (result["cell"]["gpus"], result["cell"]["batch_size"]) == (2, 4)


def test_harness_rejects_bad_specs_in_one_line(root, tmp_path, mnist,
                                               framework_python):
    data_dir, checksums = mnist
    spec = _jobs("pytorch", data_dir, checksums, [1])[0].spec
    for change, message in (
            ({"workers": 3}, "a global batch of 64 does not split evenly "
                             "over 3 workers; use a multiple of 3"),
            ({"data": dict(spec["data"], checksums=None)},
             f"{data_dir}/mnist/train-images-idx3-ubyte.gz: sha256 mismatch: "
             f"expected 440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f"
             f"203523609, got {checksums['train-images-idx3-ubyte.gz']}")):
        out = tmp_path / "bad.json"
        proc = _harness(framework_python("pytorch"), root,
                        dict(spec, **change), out)
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[-1].startswith(
            f"harness: error: {message}")
        assert not out.exists()


def _invoke(root, *args):
    return subprocess.run([str(Path(sys.executable).parent / "invoke"),
                           "converge", *args], cwd=root, capture_output=True,
                          text=True)


def test_task_bad_inputs(root, tmp_path, mnist):
    data_dir, checksums = mnist
    missing = tmp_path / "absent"
    out = _invoke(root, "--framework", "pytorch", "--network", "fcn-r",
                  "--data-dir", str(missing), "--out", str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: data folder {missing} does not "
                                 f"exist; run `invoke data --dataset mnist")
    out = _invoke(root, "--framework", "pytorch", "--network", "fcn-r",
                  "--data-dir", str(data_dir), "--workers", "1,2",
                  "--global-batch-size", "64", "--out", str(tmp_path))
    assert out.returncode == 2
    # The generated files are not MNIST: the official digests refuse them.
    assert out.stderr.startswith(f"error: {data_dir}/mnist/train-images-"
                                 f"idx3-ubyte.gz: sha256 mismatch: expected "
                                 f"440fcabf")
    out = _invoke(root, "--framework", "pytorch", "--network", "fcn-r",
                  "--synthetic", "--workers", "4", "--global-batch-size", "2")
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: 4 workers cannot share a global "
                                  "batch of 2 samples: each worker needs at "
                                  "least one")
    for output in (out.stdout, out.stderr):
        assert "Traceback" not in output
    # --resume with nothing to resume: said before any image or venv is made.
    empty = tmp_path / "empty"
    out = _invoke(root, "--framework", "pytorch", "--network", "fcn-r",
                  "--synthetic", "--resume", "--out", str(empty))
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: no convergence run under {empty} "
                                  f"to resume; run without --resume")
    assert "build:" not in out.stdout
    assert not list(tmp_path.glob("converge-*"))


class TimeoutInTraining(LocalEngine):
    """The job's timeout strikes once its workers have written curves with
    two or more iterations in them: inside training, however long a
    loaded machine takes to start them (a timeout of 20 s from the start
    can strike before they train)."""

    def run(self, launch, log_path, timeout_s):
        self.log_path = log_path
        return super().run(launch, log_path, timeout_s)

    def wait(self, proc, timeout_s):
        deadline = time.monotonic() + timeout_s
        curves = None
        while time.monotonic() < deadline and proc.poll() is None:
            curves = curves or waits.launched_curves(self.log_path)
            if curves and _iterations_written(curves) >= 2:
                break
            time.sleep(0.1)
        if proc.poll() is not None:
            return proc.returncode
        raise subprocess.TimeoutExpired(proc.args, timeout_s)


def _iterations_written(curves_path):
    seen = common.read_partial(curves_path) or {}
    current = seen.get("in_progress") or {}
    return len(seen.get("iteration_s", [])) + len(current.get("seconds", []))


def test_timeout_stops_the_workers(tmp_path, framework_python, schema):
    # 50 epochs: far more than run before the timeout strikes.
    jobs = conv_plan.plan(["pytorch"], ["fcn-r"], [2], global_batch=64,
                          epochs=50, threads=2, synthetic=True,
                          train_samples=4096, test_samples=64,
                          runtime="native", timeout=600)
    run_dir, _record, pairs, _summary = conv.execute(
        jobs, tmp_path, _native(framework_python("pytorch")), "test",
        executor=TimeoutInTraining())
    results = {entry["id"]: result for entry, result in pairs}
    record = json.loads((run_dir / "run.json").read_text())
    assert record["jobs"][0]["status"] == "timeout"
    result = results["pytorch-fcn-r-w2"]
    jsonschema.validate(result, schema)
    assert result["status"] == "timeout"
    print("timed out: {} iterations measured, {} epochs, partial {}".format(
        result["convergence"]["completed_iterations"],
        len(result["convergence"]["per_epoch"]),
        result["convergence"]["partial"]))
    # What the workers measured before the timeout is kept (the workers
    # write their curves as they grow; docs/multinode.md).
    assert result["convergence"]["partial"] is True
    assert result["convergence"]["completed_iterations"] >= 2
    assert result["timing"]["per_iteration_s"]
    # No worker outlives the run: soon nothing runs with the run's plan
    # file (a worker SIGKILLed with its launcher's group takes a moment
    # to go on a loaded machine; an orphan would train on).
    log = (run_dir / "pytorch-fcn-r-w2.log").read_text()
    plan = log.split("--plan ", 1)[1].split()[0]
    assert _gone(plan, 30), _running(plan)


def _running(needle):
    return subprocess.run(["pgrep", "-f", needle], capture_output=True,
                          text=True).stdout.split()


def _gone(needle, limit_s):
    """Whether no process's command line holds `needle` within limit_s."""
    try:
        return waits.wait_for(lambda: not _running(needle), limit_s, 0.2)
    except AssertionError:
        return False


def _under_way(seen, per_epoch):
    """Whether the curves the workers wrote show epoch 1 done and a later
    epoch with some iterations measured and half of them still to go (for
    the SIGTERM to arrive before that epoch ends). Rank 0 writes them after
    every iteration here (PROGRESS_ENV 0)."""
    seen = seen or {}
    current = seen.get("in_progress") or {}
    return bool(seen.get("epochs")) and current.get("epoch", 0) >= 2 and \
        0 < len(current["seconds"]) <= per_epoch // 2


@pytest.mark.parametrize("framework, loss_of", [("pytorch", "part"),
                                                ("cntk", "global")])
def test_a_run_terminated_after_its_first_epoch_keeps_that_epoch(
        framework, loss_of, root, tmp_path, framework_python, schema):
    """One node, 2 workers under a launcher (PyTorch: torchrun; CNTK:
    mpirun, in its image), SIGTERM (the host's timeout, Slurm's cancel)
    once epoch 1 is done and a later one under way: the result keeps the
    epochs done, the iterations measured since, and says it is partial."""
    # Many epochs: the test stops the run once the workers' curves show
    # an epoch after the first under way, however long that takes (CNTK's
    # iterations took 30 s and more on a loaded machine, 0.15 s alone).
    per_epoch = 24
    spec = _plan([framework], ["fcn-r"], [2], global_batch=32, epochs=20,
                 threads=2, synthetic=True, train_samples=32 * per_epoch,
                 test_samples=64)[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"convergence": spec, "container": None}))
    log_path, out = tmp_path / "log", tmp_path / "out.json"
    with open(log_path, "w") as log:
        harness = processes.start(
            [str(framework_python(framework)), "-s", "-m", "harness",
             "converge", "--spec", str(spec_path), "--out", str(out)],
            cwd=root, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(root),
                     **{common.PROGRESS_ENV: "0"}))
    try:
        curves = waits.wait_for(lambda: waits.launched_curves(log_path),
                                300, what="the launch line")

        def under_way():
            assert harness.poll() is None, log_path.read_text()
            return _under_way(common.read_partial(curves), per_epoch)
        waits.wait_for(under_way, 1200, what=f"epoch 2 under way in {curves}")
        harness.send_signal(signal.SIGTERM)
        status = harness.wait(120)
    finally:
        # SIGTERM first: CNTK's docker client passes it on to the
        # container, which its SIGKILL would leave running.
        processes.end(harness)
    assert status == 143, log_path.read_text()
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema)
    assert result["status"] == "error"
    assert result["error"]["type"] == "Terminated"
    block = result["convergence"]
    assert block["partial"] is True
    assert [e["epoch"] for e in block["per_epoch"]][:1] == [1]
    done = len(block["per_epoch"])
    assert len(block["curve"]["loss"]) == len(block["curve"]["seconds"]) \
        == done * per_epoch
    assert all(math.isfinite(v) for v in block["curve"]["loss"])
    assert block["final_train_loss"] == block["per_epoch"][-1]["train_loss"]
    # The epoch in progress: rank 0 wrote it when the launcher passed the
    # SIGTERM on. PyTorch reduces the global losses at the epoch's end:
    # rank 0's part's losses; CNTK's are global at every step.
    current = block["in_progress"]
    assert current and current["epoch"] == done + 1, current
    assert current["loss_of"] == loss_of
    assert 0 < len(current["loss"]) == len(current["seconds"]) < per_epoch
    measured = done * per_epoch + len(current["seconds"])
    assert block["completed_iterations"] == measured
    assert result["timing"]["completed_iterations"] == measured - 1
    assert len(result["timing"]["per_iteration_s"]) == measured - 1
    assert any("cut short" in w for w in result["warnings"])
    print("{} terminated after epoch 1: {} epochs, {} iterations measured, "
          "epoch in progress: {}".format(
              framework, done, measured, len(current["seconds"])))


def test_workers_die_with_a_killed_harness(root, tmp_path, framework_python):
    """SIGKILL leaves the harness no time to stop torchrun: the workers must
    go anyway (PR_SET_PDEATHSIG), not train on as orphans."""
    spec = _plan(["pytorch"], ["fcn-r"], [2], global_batch=64, epochs=50,
                 threads=2, synthetic=True, train_samples=4096,
                 test_samples=64)[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"convergence": spec, "container": None}))
    log_path = tmp_path / "log"
    with open(log_path, "w") as log:
        harness = subprocess.Popen(
            [str(framework_python("pytorch")), "-s", "-m", "harness",
             "converge", "--spec", str(spec_path), "--out",
             str(tmp_path / "out.json")], cwd=root, stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(root)))
    def workers_up():
        text = waits.text_of(log_path)
        plan = text.split("--plan ", 1)[1].split()[0] \
            if "--plan " in text else None
        return plan if plan and len(_running(plan)) >= 2 else None
    try:
        plan = waits.wait_for(workers_up, 300, what="two workers")
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    assert _gone(plan, 20), _running(plan)


class Recorder(conv.pipeline.Events):
    def __init__(self):
        self.started, self.messages = [], []

    def log(self, message):
        self.messages.append(message)

    def start(self, index, total, job):
        self.started.append(job.id)


@pytest.mark.parametrize("trained", ["pytorch"], indirect=True)
def test_resume_keeps_finished_runs_and_reruns_the_rest(trained, mnist,
                                                        tmp_path):
    """A run killed during its second worker count: --resume keeps the
    first result as it was and trains only the missing one."""
    import shutil
    from dlrepro.run import runfolder as results_mod
    framework, run_dir, results, runtime = trained
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    results_mod.point_latest(tmp_path, copy, "converge")
    kept = (copy / f"{framework}-fcn-r-w1.json").read_bytes()
    (copy / f"{framework}-fcn-r-w2.json").unlink()
    data_dir, checksums = mnist
    events = Recorder()
    resumed_dir, found = conv.run(
        _jobs(framework, data_dir, checksums, [1, 2]), tmp_path, runtime,
        resume=True, events=events)
    assert resumed_dir == copy.resolve()
    assert (copy / f"{framework}-fcn-r-w1.json").read_bytes() == kept
    assert events.started == [f"{framework}-fcn-r-w2"]
    assert any("1 of 2 jobs already done" in m for m in events.messages)
    assert found[f"{framework}-fcn-r-w2"]["status"] == "ok"
    record = json.loads((copy / "run.json").read_text())
    assert [r["status"] for r in record["jobs"]] == ["ok", "ok"]
    assert len(record["resumed_at"]) == 1 and record["finished_at"]


def test_resume_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no convergence run under .* to "
                                        "resume"):
        conv.run([], tmp_path, runtimes.get("native"), resume=True)
