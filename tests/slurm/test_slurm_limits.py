"""The Slurm executor against a real Slurm cluster (.ci/slurm.sh), at its
limits: bad input (one line, exit 2, nothing submitted), accounting
(states from sacct, preemption, memory) and how often a result is written
and validated on the way. Results and faults are
tests/slurm/test_slurm_results.py, which says when they skip; the shared
helpers tests/slurmenv.py.
"""
import os
import shutil
import socket
import subprocess
import sys

import pytest

from dlrepro.errors import UserError
from dlrepro.run.engines.slurm import client
from paths import ROOT, SCRIPTED
from waits import wait_for
from slurmenv import (_accounting_or_skip, _queued, fake, invoke, record,
                      result, running, start, task_state, timing)


# Every test here: a cluster or a skip, nothing left behind.
pytestmark = pytest.mark.usefixtures("slurm_cluster")


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
    assert result(tmp_path, "fcn5")["engine"]["gpu_freq"] == {
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
            return client.states([(array, 0)]).get((array, 0))
        except UserError:  # sacct does not know it yet, and no scontrol
            return None
    # slurmdbd records a job a few seconds after slurmctld has it.
    task = wait_for(from_sacct, 60)
    assert task.state == "COMPLETED" and task.source == "sacct"
    assert task.node == socket.gethostname().split(".")[0]
    said = subprocess.run([sacct, "-n", "-P", "-X", "-j", f"{array}_0", "-o",
                           "Account,QOS"], capture_output=True, text=True)
    assert said.stdout.split() == ["dlrepro|normal"], said


def test_a_task_missing_from_saccts_answer_is_asked_of_scontrol(
        tmp_path, monkeypatch):
    """sacct answers from slurmdbd's records, a snapshot: while an array's
    last pending task starts, its pending remainder can be missing from
    the answer (ReFrame met it too: reframe-hpc/reframe#3707), and a task
    the watcher waits on was taken for gone while it ran. A stand-in
    sacct gives such an answer (the race cannot be had on demand); the
    real scontrol, asked next, knows the held task."""
    scancel = shutil.which("scancel")
    array = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--array=0-1",
         "--output=/dev/null", "--wrap", "true"], capture_output=True,
        text=True, check=True).stdout.strip().split(";")[0]
    try:
        only = tmp_path / "bin"
        only.mkdir()
        (only / "scontrol").symlink_to(shutil.which("scontrol"))
        (only / "sacct").write_text(
            f"#!/bin/sh\necho '{array}_0|PENDING|JobHeldUser|"
            f"None assigned|0:0'\n")
        (only / "sacct").chmod(0o755)
        monkeypatch.setenv("PATH", str(only))
        known = client.states({(array, 0), (array, 1)})
    finally:
        subprocess.run([scancel, array], check=True)
    assert known[(array, 0)].source == "sacct"
    assert known[(array, 1)].state == "PENDING"
    assert known[(array, 1)].source == "scontrol"


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
                and line[1] == spec] == ["life.py:prepare"]
