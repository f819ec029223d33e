"""Convergence runs stopped or failing: missing GPUs, the host's timeout,
SIGTERM after the first epoch, a SIGKILLed harness; what the workers
measured is kept and no worker outlives its run."""
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

import processes
import waits
from convergeenv import GPU_MATRIX, _harness, _native, _plan, harness_env
from dlrepro.converge import plan as conv_plan
from dlrepro.converge import runner as conv
from dlrepro.run.engines.local import LocalEngine
from dlrepro.run.process import Processes
from harness.frameworks import dataparallel as common


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


class TimeoutInTraining(Processes):
    """The job's timeout strikes once its workers have written curves with
    two or more iterations in them: inside training, however long a
    loaded machine takes to start them (a timeout of 20 s from the start
    can strike before they train)."""

    def run(self, launch, log_path, timeout_s, inherited=()):
        self.log_path = log_path
        return super().run(launch, log_path, timeout_s, inherited)

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
        executor=LocalEngine(TimeoutInTraining()))
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
    """(Long because the scenario is one story: start, wait for epoch 1,
    stop, then every promise about what was kept.) One node, 2 workers under a launcher (PyTorch: torchrun; CNTK:
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
            env=harness_env(root, out, **{common.PROGRESS_ENV: "0"}))
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


def _start_converge(root, tmp_path, framework_python, log):
    """A 2-worker PyTorch convergence harness of 50 epochs (far longer than
    a test waits), its output to `log` (a file, or DEVNULL)."""
    spec = _plan(["pytorch"], ["fcn-r"], [2], global_batch=64, epochs=50,
                 threads=2, synthetic=True, train_samples=4096,
                 test_samples=64)[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"convergence": spec, "container": None}))
    out = tmp_path / "out.json"
    return subprocess.Popen(
        [str(framework_python("pytorch")), "-s", "-m", "harness",
         "converge", "--spec", str(spec_path), "--out", str(out)],
        cwd=root, stdout=log, stderr=subprocess.STDOUT,
        env=harness_env(root, out))


def test_workers_die_with_a_killed_harness(root, tmp_path, framework_python):
    """SIGKILL leaves the harness no time to stop torchrun: the workers must
    go anyway, not train on as orphans: torchrun dies with the harness
    (PR_SET_PDEATHSIG) and stops its workers, SIGKILL after its own 30 s
    grace; a worker it had started but not yet recorded (the kill lands
    while it starts them) finds the harness gone and ends itself
    (children.stay_with_launcher)."""
    log_path = tmp_path / "log"
    with open(log_path, "w") as log:
        harness = _start_converge(root, tmp_path, framework_python, log)

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
    assert _gone(plan, 60), _running(plan)


def test_workers_die_with_a_harness_killed_while_torchrun_starts_them(
        root, tmp_path, framework_python):
    """torchrun is held (SIGSTOP) once its first worker exists, the harness
    is killed, and torchrun let go: its SIGTERM (PR_SET_PDEATHSIG) now lands
    while it starts its workers, which it then leaves unstopped (its record
    of them is not made yet). They must end by themselves."""
    harness = _start_converge(root, tmp_path, framework_python,
                              subprocess.DEVNULL)

    def torchrun_with_a_worker():
        return next((pid for pid in processes.children_of(harness.pid)
                     if processes.children_of(pid)), None)
    try:
        torchrun = waits.wait_for(torchrun_with_a_worker, 300, every=0.001,
                                  what="torchrun's first worker")
        os.kill(torchrun, signal.SIGSTOP)
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    command = Path(f"/proc/{torchrun}/cmdline").read_bytes().split(b"\0")
    plan = command[command.index(b"--plan") + 1].decode()
    os.kill(torchrun, signal.SIGCONT)
    try:
        assert _gone(plan, 60), _running(plan)
    finally:
        processes.signal_each([int(p) for p in _running(plan)],
                              signal.SIGKILL)
