"""The Slurm executor against a real Slurm cluster (.ci/slurm.sh starts a
one-node one here): `invoke bench --executor slurm` on the real command
line, its tasks run by slurmd, its faults made with scancel, --time and
scontrol. Cells use tests/bin/scripted-python (tests/fake_harness.py in a
mode chosen per network) where the framework does not matter, so each case
takes seconds; one case runs real PyTorch cells both ways.

Without a cluster the tests skip, saying so, unless DLREPRO_REQUIRE_SLURM
is set (CI sets it), in which case they fail.
"""
import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fake_harness
import needs
import processes
from dlrepro.errors import UserError
from dlrepro.run import store
from dlrepro.run.engines.slurm import client
from dockerenv import BASE_OVERRIDES, PREFIX
from paths import INVOKE, ROOT, SCRIPTED
import waits
from waits import wait_for

FAKE = ["bench", "--framework", "pytorch", "--runtime", "native",
        "--python", SCRIPTED, "--warmup", "1", "--threads", "1",
        "--executor", "slurm"]


def _cluster_or_skip():
    reason = None
    if shutil.which("sinfo") is None:
        reason = "no Slurm client commands (sinfo) on PATH"
    else:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], text=True,
                              capture_output=True, timeout=30)
        states = proc.stdout.split()
        if proc.returncode != 0 or not any(
                s.rstrip("*") in ("idle", "mixed", "allocated",
                                  "completing")
                for s in states):
            reason = (f"no Slurm node up (sinfo: "
                      f"{(proc.stderr or proc.stdout).strip() or 'nothing'})")
    if reason is not None:
        needs.missing(reason, ".ci/slurm.sh", "DLREPRO_REQUIRE_SLURM")


def _accounting_or_skip():
    """The test cluster's accounting (slurmdbd: sacct, accounts and QOS
    enforced) and its preempting partition `high`, as .ci/slurm.sh sets
    them up; a cluster without them skips (fails in CI)."""
    config = subprocess.run(["scontrol", "show", "config"], text=True,
                            capture_output=True, timeout=30).stdout
    said = dict(line.split("=", 1) for line in
                (" ".join(l.split()) for l in config.splitlines())
                if " = " in line)
    said = {k.strip(): v.strip() for k, v in said.items()}
    partitions = subprocess.run(["sinfo", "-h", "-o", "%R"], text=True,
                                capture_output=True, timeout=30).stdout
    reason = None
    if said.get("AccountingStorageType") != "accounting_storage/slurmdbd":
        reason = "no Slurm accounting (AccountingStorageType " \
                 f"{said.get('AccountingStorageType')})"
    elif "qos" not in said.get("AccountingStorageEnforce", ""):
        reason = "Slurm does not enforce accounts and QOS"
    elif "high" not in partitions.split():
        reason = "no preempting partition `high`"
    if reason is not None:
        needs.missing(reason, ".ci/slurm.sh", "DLREPRO_REQUIRE_SLURM")


def _queued(under=None):
    """Array job ids in Slurm; with `under`, only those whose batch script
    lies under that folder (a test's own, not another user's)."""
    lines = subprocess.run(["squeue", "-h", "-o", "%F|%o"],
                           capture_output=True, text=True).stdout.split()
    return {line.split("|")[0] for line in lines
            if under is None or line.split("|", 1)[-1].startswith(
                str(under))}


STARTED = []


@pytest.fixture(autouse=True)
def cluster(tmp_path):
    """A cluster, and nothing of a test left behind: its submitting
    processes stopped, its Slurm jobs cancelled."""
    _cluster_or_skip()
    yield
    for proc in STARTED:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    STARTED.clear()
    left = _queued(under=tmp_path)
    if left:
        subprocess.run(["scancel"] + sorted(left))


def invoke(*args, modes="", timeout=300, env=None):
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(env or os.environ,
                                   DLREPRO_FAKE_MODES=modes))


def start(*args, modes=""):
    proc = processes.start([INVOKE, *args], cwd=ROOT,
                           env=dict(os.environ, DLREPRO_FAKE_MODES=modes),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    STARTED.append(proc)
    return proc


def fake(out, *networks, iterations=3, extra=()):
    return FAKE + ["--out", str(out), "--iterations", str(iterations)] + [
        a for n in networks for a in ("--network", n)] + list(extra)


def latest(out):
    return (Path(out) / "latest").resolve()


def record(out):
    return store.read_run(latest(out))


def result(out, network):
    path = next(p for p in latest(out).glob(f"*-{network}-*.json")
                if p.name.count(".") == 1)
    return json.loads(path.read_text())


def task_of(out, network):
    """The Slurm task id (ARRAY_INDEX) of a network's job, once submitted."""
    if not (latest(out) / "run.json").exists():
        return None
    for entry in record(out)["jobs"]:
        if f"-{network}-" in entry["id"] and entry.get("slurm"):
            return entry["slurm"]["job_id"]
    return None


def task_state(task):
    proc = subprocess.run(["scontrol", "show", "job", "-o", task],
                          capture_output=True, text=True)
    for token in proc.stdout.split():
        if token.startswith("JobState="):
            return token.split("=", 1)[1]
    return None


def slow_steps(out, network):
    """How many steps the task of `network`, in mode slow, has begun."""
    logs = list(latest(out).glob(f"*-{network}-*.log"))
    return sum(log.read_text().count(fake_harness.SLOW_STEP) for log in logs)


def timing(out, network):
    """Whether the task of `network` has finished a timed iteration."""
    return waits.said_first_timed(*latest(out).glob(f"*-{network}-*.log"))


def running(out, network):
    task = task_of(out, network)
    return task if task and task_state(task) == "RUNNING" else None


def comparable(result):
    """What a result says about its cell, without what differs between two
    runs of it (times, the host's process, where it ran)."""
    return {"status": result["status"], "cell": result["cell"],
            "fields": sorted(result),
            "model": {k: v for k, v in result["model"].items()
                      if not k.startswith("achieved")},
            "environment": sorted(result["environment"]),
            "timing": sorted(result["timing"] or {})}


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
        slurm = there.pop("slurm")
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
    assert report.returncode == 0 and report.stdout.count(" ok ") == 2


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
    assert there.pop("slurm")["node"]
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
        assert got["slurm"]["node"] and got["convergence"]
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

def test_scancel_of_a_task_ends_its_cell_keeping_what_was_measured(tmp_path):
    out = tmp_path / "r"
    proc = start(*fake(out, "fcn5", "fcn8", iterations=60),
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
                           extra=["--resume"]))
    assert resumed.returncode == 0, resumed.stderr
    rec = record(out)
    assert [j.split("-")[2] for j in rec["slurm"]["arrays"][-1]["jobs"]] \
        == ["fcn8"]
    assert len(rec["slurm"]["arrays"]) == 2
    assert {e["status"] for e in rec["jobs"]} == {"ok"}


def test_resume_submits_only_what_failed(tmp_path):
    out = tmp_path / "r"
    first = invoke(*fake(out, "fcn5", "fcn8",
                         extra=["--array-throttle", "1", "--exclusive"]),
                   modes="fcn8=crash")
    assert first.returncode == 0, first.stderr
    assert result(out, "fcn8")["status"] == "error"
    sbatch = record(out)["slurm"]["arrays"][0]["sbatch"]
    assert "--array=0-1%1" in sbatch and "--exclusive" in sbatch
    resumed = invoke(*fake(out, "fcn5", "fcn8", extra=["--resume"]))
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
    # The tasks run on without it; report shows the run as it stands.
    report = invoke("report", "--out", str(out))
    assert report.returncode == 0, report.stderr
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


# --- bad input: one line, exit 2, nothing submitted ----------------------------

def _one_line_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("extra, says", [
    (["--partition", "nosuch"], "no nodes in partition 'nosuch'"),
    (["--constraint", "nosuchfeature"], "Slurm rejects the job"),
    # extra sbatch arguments from a config file reach sbatch
    (["--slurm-config", "{config}"], "unrecognized option"),
    # refused by the accounting's associations (AccountingStorageEnforce)
    (["--account", "nosuch"], "{refusal} Invalid account"),
    (["--qos", "nosuch"], "{refusal} Invalid qos"),
])
def test_what_slurm_rejects(tmp_path, extra, says):
    if "--account" in extra or "--qos" in extra:
        _accounting_or_skip()
    says = says.format(refusal="Slurm rejects the job: allocation failure:")
    config = tmp_path.parent / f"{tmp_path.name}.toml"
    config.write_text('sbatch = ["--no-such-sbatch-option"]\n')
    before = _queued()
    line = _one_line_error(invoke(*fake(
        tmp_path, "fcn5", extra=[a.format(config=config) for a in extra])))
    assert says in line
    assert _queued() == before
    assert not any(tmp_path.iterdir())


def test_sbatch_missing(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Python only (the harness interpreter's `env python3`), no Slurm.
    (bin_dir / "python3").symlink_to(sys.executable)
    line = _one_line_error(invoke(
        *fake(tmp_path / "r", "fcn5"),
        env=dict(os.environ, PATH=str(bin_dir))))
    assert "not found on PATH" in line and "nothing was submitted" in line
    assert not (tmp_path / "r").exists()


def test_gpu_freq_is_asked_of_slurm_and_recorded(tmp_path):
    done = invoke(*fake(tmp_path, "fcn5", extra=["--gpu-freq", "high"]))
    assert done.returncode == 0, done.stderr
    assert "--gpu-freq=high" in record(tmp_path)["slurm"]["arrays"][0][
        "sbatch"]
    # No GPU here: telemetry saw nothing, and says so.
    assert result(tmp_path, "fcn5")["slurm"]["gpu_freq"] == {
        "asked": "high", "seen": None}


@pytest.mark.parametrize("extra, says", [
    (["--executor", "slurm", "--gpu-freq", "bogus"], "Invalid --gpu-freq"),
    (["--executor", "slurm", "--gpu-freq", "high", "--clock-policy",
      "disable-boost"], "--clock-policy observe"),
    (["--partition", "debug"], "--partition needs --executor slurm"),
    (["--executor", "pbs"], "unknown executor"),
    (["--executor", "slurm", "--time-limit", "soon"], "--time-limit"),
    (["--executor", "slurm", "--array-throttle", "0"], "--array-throttle"),
])
def test_bad_slurm_flags(tmp_path, extra, says):
    args = ["bench", "--framework", "pytorch", "--runtime", "native",
            "--python", SCRIPTED, "--network", "fcn5", "--out",
            str(tmp_path)] + extra
    assert says in _one_line_error(invoke(*args))
    assert not any(tmp_path.iterdir())


# --- with accounting: sacct, preemption, memory -------------------------------

def test_states_come_from_sacct(tmp_path, monkeypatch):
    """With accounting on, the executor's states() asks sacct: a finished
    task's state comes back with sacct alone on PATH (no scontrol to fall
    back on), and Slurm recorded the account and QOS the run asked for."""
    _accounting_or_skip()
    out = tmp_path / "r"
    done = invoke(*fake(out, "fcn5", extra=["--account", "dlrepro",
                                             "--qos", "normal"]))
    assert done.returncode == 0, done.stdout + done.stderr
    rec = record(out)
    assert {"--account=dlrepro", "--qos=normal"} <= set(
        rec["slurm"]["arrays"][0]["sbatch"])
    [entry] = rec["jobs"]
    assert entry["status"] == "ok", entry["message"]
    array = entry["slurm"]["array_job_id"]
    sacct = shutil.which("sacct")
    only = tmp_path / "bin"
    only.mkdir()
    (only / "sacct").symlink_to(sacct)
    monkeypatch.setenv("PATH", str(only))

    def from_sacct():
        try:
            return client.states([array]).get((array, 0))
        except UserError:  # sacct does not know it yet, and no scontrol
            return None
    # slurmdbd records a job a few seconds after slurmctld has it.
    task = wait_for(from_sacct, 60)
    assert task.state == "COMPLETED" and task.source == "sacct"
    assert task.node == socket.gethostname().split(".")[0]
    said = subprocess.run([sacct, "-n", "-P", "-X", "-j", f"{array}_0", "-o",
                           "Account,QOS"], capture_output=True, text=True)
    assert said.stdout.split() == ["dlrepro|normal"], said


def test_a_preempted_task_ends_its_cell_keeping_what_was_measured(tmp_path):
    """A job in partition `high` that needs the node's CPUs preempts the
    sweep's task in `debug` (PreemptMode=CANCEL): SIGTERM, the harness
    writes what it measured, the cell ends Preempted."""
    _accounting_or_skip()
    out = tmp_path / "r"
    proc = start(*fake(out, "fcn8", iterations=60), modes="fcn8=slow")
    task = wait_for(lambda: running(out, "fcn8"))
    wait_for(lambda: timing(out, "fcn8"))
    cpus, _ = client.largest_node("high")
    urgent = tmp_path / "urgent.sh"
    urgent.write_text("#!/bin/sh\nsleep 1\n")
    urgent_id = subprocess.run(
        ["sbatch", "--parsable", "--partition=high",
         f"--cpus-per-task={cpus}", "--mem=100M", f"--chdir={tmp_path}",
         f"--output={tmp_path}/urgent.out", str(urgent)],
        check=True, capture_output=True, text=True).stdout.strip()
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr  # its one cell was preempted
    # The urgent job ran (and is over: the next test gets the node).
    wait_for(lambda: task_state(urgent_id) == "COMPLETED", 120)
    preempted = result(out, "fcn8")
    assert preempted["status"] == "error", preempted["error"]
    assert preempted["error"]["type"] == "Preempted", preempted["error"]
    assert "PREEMPTED" in preempted["error"]["message"]
    assert task in preempted["error"]["message"]
    assert preempted["timing"]["completed_iterations"] >= 1
    assert record(out)["jobs"][0]["slurm"]["state"] == "PREEMPTED"


def test_a_cell_over_its_mem_is_oom(tmp_path):
    """A cell that cannot fit its --mem: task/cgroup holds the task to it,
    the kernel kills the harness, Slurm says OUT_OF_MEMORY; the cell is
    `oom` (not retried by --resume) and says both."""
    _accounting_or_skip()
    out = tmp_path / "r"
    done = invoke(*fake(out, "fcn8", extra=["--mem", "400M"]),
                  modes="fcn8=hog")
    assert done.returncode == 1, done.stdout + done.stderr  # oom only
    assert "--mem=400M" in record(out)["slurm"]["arrays"][0]["sbatch"]
    got = result(out, "fcn8")
    assert got["status"] == "oom", got["error"]
    assert got["error"]["type"] == "OutOfMemory"
    assert "OUT_OF_MEMORY" in got["error"]["message"]
    assert record(out)["jobs"][0]["slurm"]["state"] == "OUT_OF_MEMORY"


# --- writes ------------------------------------------------------------------

COUNTING = '''
import os, sys, traceback
sys.path.insert(0, {root!r})
LOG = {log!r}


def _note(what, name):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("%s %s %s %d\\n" % (what, name, _caller(), os.getpid()))
                 .encode())
    finally:
        os.close(fd)


def _caller():
    """The first frame outside the wrapped modules: who wrote or read."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if not frame.filename.endswith(("resultfile.py", "store.py",
                                        "writer.py", "sitecustomize.py")):
            return "%s:%s" % (os.path.basename(frame.filename), frame.name)
    return "?"


try:
    from harness import resultfile
    _write = resultfile.write_atomic

    def write_atomic(path, obj):
        _note("write", os.path.basename(str(path)))
        return _write(path, obj)
    resultfile.write_atomic = write_atomic
except Exception:
    pass
try:  # the host side only (the harness may run on another Python)
    from dlrepro.run import store
    _read = store.read_result

    def read_result(path):
        found = _read(path)
        if os.path.exists(str(path)):
            _note("validate", os.path.basename(str(path)))
        return found
    store.read_result = read_result
except Exception:
    pass
'''


def test_a_result_is_written_at_most_twice_and_validated_once(tmp_path):
    """Through Slurm each result file is written by the harness and at
    most once more on the host (its task's one write, with what the host
    adds: a timeout, the Slurm block), and schema-validated once on the way
    to run.json; its spec file is written once. The host's processes (the
    submitter, the Slurm task) count their writes and validations into one
    log (the harness runs in the runtime's own environment, without the
    counting)."""
    counting = tmp_path / "counting"
    counting.mkdir()
    log = tmp_path / "writes.log"
    (counting / "sitecustomize.py").write_text(COUNTING.format(
        root=str(ROOT), log=str(log)))
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=str(counting))
    done = invoke(*fake(out, "fcn5", "fcn8", iterations=40,
                        extra=["--timeout", "15"]),
                  modes="fcn8=slow", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {e["id"].split("-")[2]: e["status"]
            for e in record(out)["jobs"]} == {"fcn5": "ok",
                                              "fcn8": "timeout"}
    lines = [line.split() for line in log.read_text().splitlines()]
    for entry in record(out)["jobs"]:
        name = entry["file"]
        writes = [line[2] for line in lines
                  if line[0] == "write" and line[1] == name]
        # Validations while the run ran (not the summary's reading).
        checks = [line[2] for line in lines if line[0] == "validate"
                  and line[1] == name and "summary" not in line[2]]
        assert len(writes) <= 1, (name, writes)
        assert len(checks) == 1, (name, checks)
        # Its spec file: written by the submitter, found as it is by the task.
        spec = name.replace(".json", ".spec.json")
        assert [line[2] for line in lines if line[0] == "write"
                and line[1] == spec] == ["pipeline.py:_prepare_files"]
