"""What the tests of --isolation group share (test_groups, test_groups_oom,
test_groups_repeat, test_groups_default): a three-cell sweep of the
scripted harness (tests/fake_harness.py behind tests/bin/scripted-python)
and its results read back by network; jobs for the pure functions."""
import json
import os
import signal
import subprocess
from pathlib import Path

from dlrepro.run import store
from dlrepro.run.job import Job, Placement
from harness import procstat
from paths import INVOKE, ROOT, SCRIPTED
from scripted import env_for, invoke
from waits import wait_for

BENCH = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "20", "--warmup", "1",
         "--threads", "1", "--network", "fcn5", "--network", "fcn8",
         "--network", "fcn-r"]
GROUP = BENCH + ["--isolation", "group"]
NETWORKS = ("fcn5", "fcn8", "fcn-r")


def result(run_dir, network):
    return json.loads((Path(run_dir) / f"pytorch-cpu-{network}-cpu-b16-t1"
                       f".json").read_text())


def placed(run_dir, network):
    """(status, position in its worker's group, worker pid) of a cell."""
    found = result(run_dir, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("position"),
            isolation.get("worker_pid"))


def statuses(run_dir):
    return {next(n for n in NETWORKS if f"-{n}-cpu-" in e["id"]): e["status"]
            for e in store.read_run(run_dir)["jobs"]}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def job(network, process=1, framework="pytorch", seed=0, isolation="group"):
    """A bench job as bench.plan makes it, for the ordering's pure
    functions (dlrepro.run.groups)."""
    cell = {"framework": framework, "profile": "cpu", "network": network,
            "runtime": "native", "device": "cpu", "gpus": 0, "threads": 1,
            "precision": "default", "compile": None,
            "clock_policy": "observe", "seed": seed}
    suffix = f"-p{process}" if process > 1 else ""
    return Job(id=f"{framework}-{network}{suffix}", kind="bench", spec=cell,
               timeout_s=60, placement=Placement(framework, "cpu", "cpu", 1,
                                                 0, "observe"),
               process=process, isolation=isolation)


def worker_pids(run_dir):
    """PIDs of the run's workers (a fork server's children too): a
    worker's command line names no run folder, but its standard error is
    its `<first job id>.worker.log` there."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            log = os.readlink(proc / "fd" / "2")
        except OSError:
            continue
        if log.startswith(f"{run_dir}/") and log.endswith(".worker.log"):
            pids.append(int(proc.name))
    return pids


def ctrl_c_keeps_fcn5(proc, run_dir):
    """Ctrl-C to a sweep whose fcn8 is under way: exit 130, one line that
    keeps the finished fcn5, the run `interrupted`; fcn8's result."""
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "kept 1 finished job(s)" in err and "Traceback" not in err
    assert store.read_run(run_dir)["status"] == "interrupted"
    stopped = result(run_dir, "fcn8")
    assert stopped["error"]["type"] == "Terminated"
    return stopped


def sweep_in_memory_cgroup(args, modes, memory_cgroup):
    """`invoke *args` run to its end inside the test's memory cgroup (the
    kernel's OOM killer then picks among the sweep's processes only):
    (the process, its stdout, its stderr)."""
    proc = subprocess.Popen([INVOKE, *args], cwd=ROOT, env=env_for(modes),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=memory_cgroup.enter)
    out, err = proc.communicate(timeout=300)
    return proc, out, err


def compare_names_the_isolation_modes(out, isolation):
    """A run per cell, then one under `isolation`: `compare` says they were
    measured under different modes."""
    one = BENCH[:-4] + ["--out", str(out)]
    assert invoke(*one, "--isolation", "cell").returncode == 0
    base = (out / "latest").resolve().name
    assert invoke(*one, "--isolation", isolation).returncode == 0
    compared = invoke("compare", "--out", str(out), "--against", base)
    assert compared.returncode == 0, compared.stderr
    assert (f"different isolation modes (base: cell, this run: "
            f"{isolation})") in compared.stdout


def three_cells_in_one_worker(out, args, placement=placed):
    """`invoke *args --out out` over NETWORKS: every cell ok, in order, in
    one worker (or fork server). (The finished command, the run folder,
    each cell's `placement`: status, position, worker pid first.)"""
    done = invoke(*args, "--out", str(out))
    assert done.returncode == 0, done.stderr
    run_dir = (out / "latest").resolve()
    cells = [placement(run_dir, n) for n in NETWORKS]
    assert [c[:2] for c in cells] == [("ok", 1), ("ok", 2), ("ok", 3)]
    assert len({c[2] for c in cells}) == 1
    return done, run_dir, cells


# --- a fork server's processes -------------------------------------------


def server_logs(run_dir):
    return "".join(p.read_text(errors="replace")
                   for p in sorted(Path(run_dir).glob("*.worker.log")))


def parent_of(pid):
    try:
        return procstat.parent_of(pid)
    except OSError:
        return None


def processes_of(run_dir):
    """{pid: parent pid} of the processes writing a server log of the run:
    its servers and their children."""
    return {pid: parent_of(pid) for pid in worker_pids(run_dir)}


def child_and_server(run_dir):
    """(child pid, server pid) of the cell running now, once there is one."""
    def found():
        pids = processes_of(run_dir)
        children = [(p, parent) for p, parent in pids.items()
                    if parent in pids]
        return children[0] if len(children) == 1 else None
    return wait_for(found, what="a forked child")
