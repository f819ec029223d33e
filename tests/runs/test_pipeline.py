"""The job pipeline with real processes: timeouts, crashes, kills, invalid
results and resume. A scripted harness (tests/fake_harness.py) stands in
for the frameworks; each network name picks a behaviour."""
import json
import sys
import time

import pytest

from dlrepro import matrix
from dlrepro.bench import plan
from dlrepro.run import pipeline, runrecord, store as results
from dlrepro.run import process
from dlrepro.run.runtimes import Launch, Runtime
from paths import TESTS

MODES = {"fcn5": "ok", "fcn8": "slow", "alexnet": "stubborn",
         "resnet50": "crash", "lstm32": "kill", "lstm64": "invalid",
         "lstm": "torn-clocks"}


class ScriptedRuntime(Runtime):
    name = "native"

    def __init__(self):
        self.launched = []

    def check(self):
        pass

    def prepare(self, targets, log=print):
        return {t: None for t in targets}

    def describe(self, target):
        return None

    def launch(self, job, run_dir):
        self.launched.append(job.id)
        return Launch(argv=[sys.executable, str(TESTS /
                                                 "fake_harness.py"),
                            MODES[job.spec["network"]],
                            "--spec", str(run_dir / f"{job.id}.spec.json"),
                            "--out", str(run_dir / f"{job.id}.json")])


SUITE = {"name": "t", "description": "", "path": "t.toml", "groups": [
    {"networks": list(MODES), "batch_sizes": [4], "device": "cpu",
     "threads": [1], "gpus": [1], "iterations": 3, "warmup": 1,
     "timeout_s": 4, "frameworks": None}]}


@pytest.fixture
def sweep_run(tmp_path, monkeypatch):
    monkeypatch.setattr(process, "GRACE_S", 2)
    m = matrix.load()

    def _run(networks, resume=False, threads=None):
        options = plan.Options(frameworks=("pytorch",), networks=tuple(networks),
                               threads=threads or ())
        jobs = plan.build(SUITE, options, m, plan.Host(cpus=2, gpus=0))
        runtime = ScriptedRuntime()
        run = pipeline.Run(kind="bench", jobs=jobs, out=tmp_path, name="t",
                           command="test", resume=resume)
        return pipeline.start(run, runtime, m), runtime
    return _run


def _result(run_dir, network):
    cell_id = f"pytorch-cpu-{network}-cpu-b4-t1"
    result = json.loads((run_dir / f"{cell_id}.json").read_text())
    assert results.validation_errors(result) == []
    return result


def test_every_failure_ends_in_a_valid_result_and_the_sweep_goes_on(sweep_run):
    start = time.monotonic()
    run_dir, runtime = sweep_run([n for n in MODES if n != "lstm"])
    assert len(runtime.launched) == 6
    assert _result(run_dir, "fcn5")["status"] == "ok"

    slow = _result(run_dir, "fcn8")
    assert slow["status"] == "timeout"
    assert slow["error"]["message"].startswith("cell exceeded its 4 s timeout")
    # the harness wrote what it had measured before SIGTERM
    assert slow["timing"]["completed_iterations"] >= 1

    stubborn = _result(run_dir, "alexnet")
    assert stubborn["status"] == "timeout" and stubborn["timing"] is None

    crash = _result(run_dir, "resnet50")
    assert crash["status"] == "error"
    assert "status 3" in crash["error"]["message"]
    assert "boom: the framework crashed" in crash["error"]["message"]

    # a SIGKILL with no OOM kill on the kernel's record is not `oom`
    killed = _result(run_dir, "lstm32")
    assert killed["status"] == "error"
    assert "killed by SIGKILL from outside" in killed["error"]["message"]

    invalid = _result(run_dir, "lstm64")
    assert invalid["error"]["type"] == "InvalidResult"
    assert (run_dir / "pytorch-cpu-lstm64-cpu-b4-t1.invalid.json").exists()

    record = results.read_run(run_dir)
    assert record["status"] == "complete"
    assert [c["status"] for c in record["jobs"]] == [
        "ok", "timeout", "timeout", "error", "error", "error"]
    # two timeouts of 4 s, one of them plus the 2 s grace: well under a minute
    assert time.monotonic() - start < 40


def test_resume_skips_cells_done_with_the_same_definition(sweep_run):
    run_dir, first = sweep_run(["fcn5", "resnet50"])
    _, second = sweep_run(["fcn5", "resnet50", "lstm32"], resume=True)
    # fcn5 was ok: skipped; resnet50 errored: retried; lstm32 is new
    assert second.launched == ["pytorch-cpu-resnet50-cpu-b4-t1",
                               "pytorch-cpu-lstm32-cpu-b4-t1"]
    record = results.read_run(run_dir)
    assert [c["id"] for c in record["jobs"]] == [
        "pytorch-cpu-fcn5-cpu-b4-t1", "pytorch-cpu-resnet50-cpu-b4-t1",
        "pytorch-cpu-lstm32-cpu-b4-t1"]


def test_unsupported_cells_never_start(sweep_run, tmp_path):
    run_dir, runtime = sweep_run(["fcn5"], threads=(8,))
    assert runtime.launched == []
    result = _result_id(run_dir, "pytorch-cpu-fcn5-cpu-b4-t8")
    assert result["status"] == "unsupported"
    assert result["error"]["message"] == ("needs 8 CPU threads; this host has "
                                          "2 usable CPUs")


def _result_id(run_dir, cell_id):
    result = json.loads((run_dir / f"{cell_id}.json").read_text())
    assert results.validation_errors(result) == []
    return result


def test_run_json_is_rewritten_after_every_cell(sweep_run, monkeypatch):
    seen = []
    original = runrecord.write_run

    def spy(run_dir, record):
        seen.append([c["status"] for c in record["jobs"]])
        original(run_dir, record)
    monkeypatch.setattr(runrecord, "write_run", spy)
    sweep_run(["fcn5", "resnet50"])
    assert ["ok", "pending"] in seen
    assert seen[-1] == ["ok", "error"]


def test_gpu_clocks_left_changed_are_reported_after_the_cell(sweep_run):
    run_dir, _ = sweep_run(["lstm"])
    result = _result(run_dir, "lstm")
    assert result["status"] == "ok"
    assert any("clock-state file is unreadable" in w
               for w in result["warnings"])


def test_a_convergence_job_that_cannot_run_ends_in_a_valid_result(tmp_path):
    """Bench and converge jobs share the pipeline: a convergence job that
    never starts gets a host-made result that the schema accepts, in a
    run folder of kind `converge`."""
    from dlrepro.converge import plan as conv_plan
    # As many samples as one global batch (planning refuses fewer).
    jobs = conv_plan.plan(["pytorch"], ["fcn-r"], [1], synthetic=True,
                          train_samples=1024, test_samples=16,
                          runtime="native")
    jobs = [jobs[0]._replace(skip_reason="no GPUs here")]
    runtime = ScriptedRuntime()
    run = pipeline.Run(kind="converge", jobs=jobs, out=tmp_path,
                       name="converge", command="test")
    run_dir = pipeline.start(run, runtime)
    assert runtime.launched == []
    record, pairs = results.load_run(run_dir)
    assert record["kind"] == "converge" and record["status"] == "complete"
    (entry, result), = pairs
    assert entry["status"] == "unsupported" and result is not None
    assert result["cell"]["network"] == "fcn-r"
    assert result["error"]["message"] == "no GPUs here"
    assert (tmp_path / "latest-converge").resolve() == run_dir


class MissingInterpreter(ScriptedRuntime):
    def launch(self, job, run_dir):
        self.launched.append(job.id)
        return Launch(argv=["/nonexistent/python", "-m", "harness"])


def test_a_harness_that_cannot_start_is_that_cells_error(tmp_path):
    """An interpreter or engine client that vanished after the checks:
    the cell says why, the run goes on, nothing is blamed on the disk."""
    m = matrix.load()
    options = plan.Options(frameworks=("pytorch",), networks=("fcn5", "fcn8"))
    jobs = plan.build(SUITE, options, m, plan.Host(cpus=2, gpus=0))
    runtime = MissingInterpreter()
    run = pipeline.Run(kind="bench", jobs=jobs, out=tmp_path, name="t",
                       command="test")
    run_dir = pipeline.start(run, runtime, m)
    assert len(runtime.launched) == 2
    for job in jobs:
        result = _result_id(run_dir, job.id)
        assert result["status"] == "error"
        assert result["error"]["message"] == (
            "the harness could not be started: /nonexistent/python: No such "
            "file or directory")
