"""The Slurm executor against a real Slurm cluster (.ci/slurm.sh starts a
one-node one here), its results and faults: `invoke bench --executor slurm`
on the real command line, its tasks run by slurmd, the same cells as a
local run (fake, real PyTorch, docker, convergence), --no-wait then
report then --resume, and its faults made with scancel, --time, scontrol
and Ctrl-C. Bad input, accounting and result writes are
tests/slurm/test_slurm_limits.py; the shared helpers tests/slurmenv.py.

Without a cluster the tests skip, saying so, unless DLREPRO_REQUIRE_SLURM
is set (CI sets it), in which case they fail.
"""
import json
import os
import pty
import select
import signal
import socket
import subprocess
import time

import pytest

import processes
from dlrepro.run import store
from dockerenv import BASE_OVERRIDES, PREFIX
from paths import INVOKE, ROOT
from waits import wait_for
from slurmenv import (comparable, fake, invoke, record, result, running,
                      slow_steps, start, task_of, task_state, timing)


# Every test here: a cluster or a skip, nothing left behind.
pytestmark = pytest.mark.usefixtures("slurm_cluster")


# --- results -----------------------------------------------------------------

def test_pytorch_cells_via_slurm_match_a_local_run(tmp_path):
    """Real PyTorch in its native environment, the same two cells run
    locally and through Slurm: same cells, same statuses, same fields; the
    Slurm results also say where they ran."""
    args = ["bench", "--framework", "pytorch", "--runtime", "native",
            "--network", "fcn5", "--network", "lstm32", "--iterations", "2",
            "--warmup", "1", "--threads", "1"]
    local = invoke(*args, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    via = invoke(*args, "--out", str(tmp_path / "slurm"), "--executor",
                 "slurm")
    assert via.returncode == 0, via.stdout + via.stderr
    assert record(tmp_path / "slurm")["executor"] == "slurm"
    for network in ("fcn5", "lstm32"):
        here, there = (result(tmp_path / "local", network),
                       result(tmp_path / "slurm", network))
        assert here["status"] == "ok", here["error"]
        slurm = there.pop("engine")
        assert comparable(here) == comparable(there)
        assert slurm["node"] == socket.gethostname().split(".")[0]
        assert slurm["allocation"]["SLURM_JOB_ID"] == slurm["slurm_job_id"]
        assert slurm["allocation"]["SLURM_CPUS_PER_TASK"] == "1"
        assert slurm["job_id"] == (f"{slurm['array_job_id']}_"
                                   f"{slurm['array_task_id']}")
        assert slurm["placement"]["cpus"]
        assert slurm["gpu_freq"] == {"asked": None, "seen": None}
        assert "| ok" not in via.stdout  # the table, not a raw dump
    report = invoke("report", "--out", str(tmp_path / "slurm"))
    rows = [line for line in report.stdout.splitlines()
            if line.startswith("pytorch ")]
    assert report.returncode == 0 and len(rows) == 2, report.stdout
    assert all(" ok " in row for row in rows), report.stdout


def test_docker_cells_via_slurm_match_a_local_run(cpu_images, tmp_path):
    """The docker runtime in a Slurm task: the container started from the
    node, the same image, cell and fields as a local docker run."""
    env = dict(os.environ, DLREPRO_IMAGE_PREFIX=PREFIX,
               DLREPRO_BASE_OVERRIDES=BASE_OVERRIDES)
    args = ["bench", "--framework", "pytorch", "--runtime", "docker",
            "--network", "fcn-r", "--iterations", "2", "--warmup", "1",
            "--threads", "1"]
    local = invoke(*args, "--out", str(tmp_path / "local"), env=env)
    assert local.returncode == 0, local.stdout + local.stderr
    via = invoke(*args, "--out", str(tmp_path / "slurm"), "--executor",
                 "slurm", env=env)
    assert via.returncode == 0, via.stdout + via.stderr
    here, there = (result(tmp_path / "local", "fcn-r"),
                   result(tmp_path / "slurm", "fcn-r"))
    assert here["status"] == "ok", here["error"]
    assert there.pop("engine")["node"]
    assert comparable(here) == comparable(there)
    assert there["environment"]["container"]["image"] == \
        cpu_images["pytorch"]


def test_converge_via_slurm(tmp_path):
    """A convergence run (real PyTorch, two data-parallel workers on
    synthetic data) as a Slurm task: its result, then the figures across
    worker counts, as locally."""
    done = subprocess.run(
        [INVOKE, "converge", "--framework", "pytorch", "--network", "fcn-r",
         "--synthetic", "--workers", "1,2", "--epochs", "1",
         "--global-batch-size", "32", "--train-samples", "256",
         "--test-samples", "64", "--threads", "2", "--runtime", "native",
         "--out", str(tmp_path), "--executor", "slurm"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (tmp_path / "latest-converge").resolve()
    rec = store.read_run(run_dir)
    assert rec["executor"] == "slurm" and rec["status"] == "complete"
    [array] = rec["slurm"]["arrays"]  # both ask for --threads 2
    assert "--cpus-per-task=2" in array["sbatch"]
    for entry in rec["jobs"]:
        assert entry["status"] == "ok", entry["message"]
        got = json.loads((run_dir / entry["file"]).read_text())
        assert got["engine"]["node"] and got["convergence"]
    assert (run_dir / "convergence.json").exists()


def test_no_wait_then_report_then_resume_collects(tmp_path):
    out = tmp_path / "r"
    submitted = invoke(*fake(out, "fcn5", "fcn8", iterations=4,
                             extra=["--no-wait"]), modes="fcn8=slow")
    assert submitted.returncode == 0, submitted.stderr
    assert "submitted to Slurm as array job(s)" in submitted.stdout
    assert record(out)["status"] == "submitted"
    report = invoke("report", "--out", str(out))
    assert report.returncode == 0 and "(submitted)" in report.stdout
    # fcn8 takes 5 s of iterations: still in Slurm, and report says so.
    assert "slurm now: " in report.stdout, report.stdout
    resumed = invoke(*fake(out, "fcn5", "fcn8", iterations=4,
                           extra=["--resume"]), modes="fcn8=slow")
    assert resumed.returncode == 0, resumed.stderr
    rec = record(out)
    assert rec["status"] == "complete"
    # Waited for the tasks already queued: nothing submitted twice.
    assert len(rec["slurm"]["arrays"]) == 1
    assert {e["status"] for e in rec["jobs"]} == {"ok"}
    assert len(result(out, "fcn8")["timing"]["per_iteration_s"]) == 4


# --- faults ------------------------------------------------------------------

# A task per cell, named: PyTorch's CPU cells fork by default, a key per
# task (tests/slurm/test_slurm_fork.py).
CELL = ["--isolation", "cell"]

def test_scancel_of_a_task_ends_its_cell_keeping_what_was_measured(tmp_path):
    out = tmp_path / "r"
    proc = start(*fake(out, "fcn5", "fcn8", iterations=60, extra=CELL),
                 modes="fcn8=slow")
    task = wait_for(lambda: running(out, "fcn8"))
    wait_for(lambda: timing(out, "fcn8"))
    subprocess.run(["scancel", task], check=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    cancelled = result(out, "fcn8")
    assert cancelled["status"] == "error"
    assert cancelled["error"]["type"] == "Cancelled"
    assert "CANCELLED" in cancelled["error"]["message"]
    assert task in cancelled["error"]["message"]
    assert cancelled["timing"]["completed_iterations"] >= 1
    assert result(out, "fcn5")["status"] == "ok"
    if record(out)["jobs"][1]["slurm"].get("source") == "sacct":
        # sacct says by whom; scontrol only CANCELLED.
        assert "CANCELLED by " in cancelled["error"]["message"]
    # --resume runs only the cancelled cell again, as a new array.
    resumed = invoke(*fake(out, "fcn5", "fcn8", iterations=60,
                           extra=CELL + ["--resume"]))
    assert resumed.returncode == 0, resumed.stderr
    rec = record(out)
    assert [j.split("-")[2] for j in rec["slurm"]["arrays"][-1]["jobs"]] \
        == ["fcn8"]
    assert len(rec["slurm"]["arrays"]) == 2
    assert {e["status"] for e in rec["jobs"]} == {"ok"}


def test_resume_submits_only_what_failed(tmp_path):
    out = tmp_path / "r"
    first = invoke(*fake(out, "fcn5", "fcn8",
                         extra=CELL + ["--array-throttle", "1",
                                       "--exclusive"]),
                   modes="fcn8=crash")
    assert first.returncode == 0, first.stderr
    assert result(out, "fcn8")["status"] == "error"
    sbatch = record(out)["slurm"]["arrays"][0]["sbatch"]
    assert "--array=0-1%1" in sbatch and "--exclusive" in sbatch
    resumed = invoke(*fake(out, "fcn5", "fcn8", extra=CELL + ["--resume"]))
    assert resumed.returncode == 0, resumed.stderr
    arrays = record(out)["slurm"]["arrays"]
    assert len(arrays) == 2
    assert [j.split("-")[2] for j in arrays[1]["jobs"]] == ["fcn8"]
    assert result(out, "fcn8")["status"] == "ok"


def test_a_task_past_its_time_limit_is_a_timeout(tmp_path):
    """Slurm's own limit (one minute, its smallest), not the cell's."""
    out = tmp_path / "r"
    done = invoke(*fake(out, "fcn8", iterations=300,
                        extra=["--time-limit", "1"]), modes="fcn8=slow",
                  timeout=400)
    assert done.returncode == 1, done.stderr  # its one cell timed out
    late = result(out, "fcn8")
    assert late["status"] == "timeout", late["error"]
    assert "TIMEOUT" in late["error"]["message"]
    assert late["timing"]["completed_iterations"] >= 30


def test_a_node_set_down_mid_run_fails_its_cell(tmp_path):
    out = tmp_path / "r"
    node = socket.gethostname().split(".")[0]
    proc = start(*fake(out, "fcn8", iterations=60), modes="fcn8=slow")
    try:
        wait_for(lambda: running(out, "fcn8"))
        wait_for(lambda: timing(out, "fcn8"))
        subprocess.run(["scontrol", "update", f"nodename={node}",
                        "state=down", "reason=dlrepro-test"], check=True)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}",
                        "state=resume"], capture_output=True)
        # ReturnToService=2 may have brought it back already.
        wait_for(lambda: subprocess.run(
            ["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True,
            text=True).stdout.startswith(("idle", "mixed", "allocated")), 60)
    assert proc.returncode == 1, stderr  # its one cell failed
    lost = result(out, "fcn8")
    assert lost["status"] == "error"
    assert lost["error"]["type"] == "NodeFail", lost["error"]
    assert "NODE_FAIL" in lost["error"]["message"]


def test_resume_after_the_submitting_process_was_killed(tmp_path):
    out = tmp_path / "r"
    args = fake(out, "fcn5", "fcn8", "alexnet", iterations=4)
    modes = "fcn8=slow,alexnet=slow"
    proc = start(*args, modes=modes)
    wait_for(lambda: task_of(out, "alexnet"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # The tasks run on without it; report shows the run as it stands:
    # submitted, its tasks in Slurm (issue 42 item 22: it said
    # "(interrupted)" while they ran).
    report = invoke("report", "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[0].endswith("(submitted)"), \
        report.stdout
    resumed = invoke(*args, "--resume", modes=modes)
    assert resumed.returncode == 0, resumed.stderr
    rec = record(out)
    assert len(rec["slurm"]["arrays"]) == 1
    assert {e["status"] for e in rec["jobs"]} == {"ok"}
    for network in ("fcn8", "alexnet"):
        assert len(result(out, network)["timing"]["per_iteration_s"]) == 4


def test_ctrl_c_without_a_terminal_leaves_the_tasks_queued(tmp_path):
    out = tmp_path / "r"
    args = fake(out, "fcn8", iterations=5)
    proc = start(*args, modes="fcn8=slow")
    task = wait_for(lambda: task_of(out, "fcn8"))
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "left queued or running" in stderr
    assert task_state(task) in ("PENDING", "RUNNING", "COMPLETING",
                                "COMPLETED")
    resumed = invoke(*args, "--resume", modes="fcn8=slow")
    assert resumed.returncode == 0, resumed.stderr
    assert result(out, "fcn8")["status"] == "ok"


def _read_until(fd, marker, seconds=120):
    seen = b""
    deadline = time.monotonic() + seconds
    while marker not in seen:
        assert time.monotonic() < deadline, seen[-2000:]
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            seen += chunk
    return seen.decode(errors="replace")


def _end_child(pid):
    """SIGKILL and reap the child `pid`, not yet reaped."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def test_ctrl_c_on_a_terminal_asks_then_cancels(tmp_path):
    """On a terminal, Ctrl-C asks before scancel; a yes cancels the task,
    whose cell then ends as cancelled, keeping what it measured."""
    out = tmp_path / "r"
    pid, fd = pty.fork()
    if pid == 0:  # the child: invoke on the terminal
        try:
            processes.sigint_at_default()
            os.chdir(ROOT)
            os.environ["DLREPRO_FAKE_MODES"] = "fcn8=slow"
            os.execv(INVOKE, [INVOKE] + fake(out, "fcn8", iterations=60))
        finally:
            os._exit(127)
    status = None
    try:
        task = wait_for(lambda: running(out, "fcn8"))
        # Some iterations measured: the warm-up's step and two timed ones
        # begun (1 s each; the cell has 60).
        wait_for(lambda: slow_steps(out, "fcn8") >= 3)
        os.write(fd, b"\x03")  # Ctrl-C, as the terminal sends it
        _read_until(fd, b"[y/N]")
        os.write(fd, b"y\n")
        said = _read_until(fd, b"--resume")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        if status is None:  # not reaped: a wait above failed
            _end_child(pid)
    assert os.WEXITSTATUS(status) == 130, said
    assert "were cancelled" in said
    assert task_state(task) == "CANCELLED"
    cancelled = result(out, "fcn8")
    assert cancelled["error"]["type"] == "Cancelled", cancelled["error"]
    assert cancelled["timing"]["completed_iterations"] >= 1
    assert record(out)["status"] == "interrupted"
