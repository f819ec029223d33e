"""--isolation fork with real PyTorch on the real command line (its venv,
.venvs/pytorch-cpu): the server imports torch once, each cell is a child
it forks; a child SIGKILLed mid-cell ends that cell alone and the server
forks the next; --resume measures the killed cell again and nothing
else; Ctrl-C mid-cell stops server and child, and --resume keeps what
was done. The scripted harness proves every fault
(tests/runs/test_fork_faults.py); this proves them with the framework's own
threads and allocator in the forked children."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

import processes
from dlrepro.run import store
from groupcells import child_and_server, server_logs
from harness import procstat
from harness.timing import FIRST_TIMED
from paths import INVOKE, ROOT
from waits import wait_for

# Two cells of one process key: fcn-r (small, so --resume stays short) at
# two batch sizes, with enough timed steps that the first is still
# measuring when the test acts.
BATCHES = ("8", "16")
ARGS = ["bench", "--framework", "pytorch", "--runtime", "native",
        "--isolation", "fork", "--threads", "1", "--iterations", "1000",
        "--warmup", "1", "--network", "fcn-r", "--batch-size", "8",
        "--batch-size", "16"]
WAIT_S = 600


@pytest.fixture(autouse=True)
def pytorch_venv(framework_python):
    framework_python("pytorch")


def statuses(run_dir):
    return {next(b for b in BATCHES if f"-b{b}-" in e["id"]): e["status"]
            for e in store.read_run(run_dir)["jobs"]}


def result(run_dir, batch):
    (path,) = Path(run_dir).glob(f"pytorch-cpu-fcn-r-cpu-b{batch}-t1.json")
    return store.load_result(path)


def start(out):
    return processes.start([INVOKE, *ARGS, "--out", str(out)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)


def under_way(out):
    """The run folder, once the first cell's child timed its first step."""
    run_dir = wait_for(lambda: (out / "latest").exists() and
                       (out / "latest").resolve(), seconds=WAIT_S)
    wait_for(lambda: FIRST_TIMED in server_logs(run_dir), seconds=WAIT_S,
             what="the first cell's first timed step")
    return run_dir


def resume(out):
    return subprocess.run([INVOKE, *ARGS, "--out", str(out), "--resume"],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S)


def test_a_real_child_killed_mid_cell_is_that_cell_alone(tmp_path):
    proc = start(tmp_path)
    run_dir = under_way(tmp_path)
    child, server = child_and_server(run_dir)
    os.kill(child, signal.SIGKILL)
    out, err = proc.communicate(timeout=WAIT_S)
    assert statuses(run_dir) == {"8": "error", "16": "ok"}, out + err
    assert "killed by SIGKILL" in result(run_dir, "8")["error"]["message"]
    rest = result(run_dir, "16")["isolation"]
    assert (rest["mode"], rest["position"], rest["worker_pid"]) == \
        ("fork", 2, server)
    assert rest["parent"]["preload"]["modules"] == ["torch", "torch._dynamo"]
    kept = result(run_dir, "16")
    again = resume(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"8": "ok", "16": "ok"}
    assert result(run_dir, "16") == kept


def test_ctrl_c_mid_cell_stops_server_and_child_and_resume_runs_both(
        tmp_path):
    proc = start(tmp_path)
    run_dir = under_way(tmp_path)
    child, server = child_and_server(run_dir)
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    stopped = result(run_dir, "8")
    assert stopped["error"]["type"] == "Terminated"
    # what the child measured before the signal stays in its result
    assert stopped["timing"]["per_iteration_s"]
    for pid in (server, child):
        assert not Path(f"/proc/{pid}").exists() or \
            procstat.stat_fields(pid)[0] == "Z"
    again = resume(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 of 2 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"8": "ok", "16": "ok"}
