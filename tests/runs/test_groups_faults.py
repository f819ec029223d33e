"""The faults of tests/runs/test_faults.py that go another way when a group's
cells share one worker (`--isolation group`), on the real command line with
the scripted harness's worker (tests/fake_harness.py worker, which runs each
cell in the mode DLREPRO_FAKE_MODES gives its network, as `run` does): the
sweep killed or interrupted while the worker, not a process of the cell's
own, has just written a result; a full disk; an OOM kill whose victim must
be told from the worker's pid. Each ends as it does with a process per
cell."""
import signal
import subprocess
from pathlib import Path

import fake_harness
import memcgroup
import processes
from dlrepro.run import store
from groupcells import worker_pids
from paths import INVOKE, ROOT
from waits import wait_for

from scripted import (BENCH, env_for, fills_the_disk, invoke,
                      resumes_with_room, row, start, started_at, statuses)

GROUP = ["--isolation", "group"]


def bench(out, *networks, modes="", extra=()):
    return invoke(*BENCH, *GROUP, "--out", str(out),
                  *[a for n in networks for a in ("--network", n)], *extra,
                  modes=modes)


def slow_steps(run_dir):
    """Steps begun by a slow cell in any worker of the run (a job's own log
    is filled only when its cell ends)."""
    return sum(path.read_text(errors="replace").count(fake_harness.SLOW_STEP)
               for path in Path(run_dir).glob("*.worker.log"))


def start_in(cgroup, *args, modes=""):
    """`invoke ARGS` in the memory cgroup `cgroup`, with its workers."""
    enter = f'echo $$ > {cgroup.directory / "cgroup.procs"} && exec "$@"'
    return processes.start(["sh", "-c", enter, "sh", INVOKE, *args],
                           cwd=ROOT, env=env_for(modes),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)


def result(run_dir, network):
    return store.load_result(Path(run_dir) /
                             f"pytorch-cpu-{network}-cpu-b16-t1.json")


def test_a_kill_after_a_worker_wrote_a_result_keeps_it_for_resume(tmp_path):
    """The sweep SIGKILLed just after the worker wrote fcn5's result, before
    its `cell-done` line was read: report shows it, --resume keeps it."""
    proc = bench(tmp_path, "fcn5", "fcn8", modes="fcn5=ok-kill-parent")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    run_dir = (tmp_path / "latest").resolve()
    assert statuses(run_dir) == {"fcn5": "pending", "fcn8": "pending"}
    # the orphaned worker is told of its parent's death and ends
    wait_for(lambda: not worker_pids(run_dir), what="the worker's end")
    before = started_at(run_dir, "fcn5")
    report = invoke("report", "--out", str(tmp_path))
    assert row(report.stdout, "fcn5")[5] == "ok", report.stdout
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert started_at(run_dir, "fcn5") == before
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "ok"}


def test_ctrl_c_just_after_a_worker_wrote_a_result_counts_it(tmp_path):
    """Ctrl-C while the host waits for the worker's `cell-done`, the
    result already written: kept, and not measured again."""
    # started with SIGINT at its default, whatever the test runner's
    proc = start(*BENCH, *GROUP, "--out", str(tmp_path), "--network", "fcn5",
                 "--network", "fcn8", modes="fcn5=ok-interrupt-parent")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "kept 1 finished job(s)" in err and "Traceback" not in err
    run_dir = (tmp_path / "latest").resolve()
    assert result(run_dir, "fcn5")["status"] == "ok"
    before = started_at(run_dir, "fcn5")
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert started_at(run_dir, "fcn5") == before


def test_a_full_disk_in_a_group_is_one_line_and_resume_keeps_the_rest(
        small_disk):
    """The worker fills the disk mid-cell and dies without a result: one
    line, exit 2; --resume (room made) measures the other two, grouped,
    and keeps fcn5."""
    run_dir = fills_the_disk(bench, small_disk)
    assert result(run_dir, "fcn5")["status"] == "ok"
    resumes_with_room(bench, small_disk, run_dir)


def test_another_process_oom_killed_during_a_cell_is_not_the_workers(
        tmp_path, memory_cgroup):
    """A hog beside the sweep is the OOM killer's victim, then the worker is
    SIGKILLed from outside mid-cell: an error that names both pids,
    measured again by --resume; not `oom`."""
    args = [*BENCH[:BENCH.index("--iterations")], "--iterations", "600",
            "--warmup", "0", "--threads", "1", "--out", str(tmp_path),
            "--network", "fcn8", *GROUP]
    proc = start_in(memory_cgroup, *args, modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    wait_for(lambda: slow_steps(run_dir), what="the cell's first step")
    (pid,) = worker_pids(run_dir)
    hog = memory_cgroup.hog_killed_then_kill(pid)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err  # its one job failed
    found = result(run_dir, "fcn8")
    message = found["error"]["message"]
    assert found["status"] == "error", message
    assert "killed by SIGKILL from outside; " in message
    assert memcgroup.names_victim(message, hog), message
    assert f"not the harness (pid {pid})" in message
    again = invoke(*args, "--resume")
    assert "0 of 1 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"fcn8": "ok"}


def test_a_worker_that_is_the_oom_killers_victim_ends_its_cell_oom(
        tmp_path, memory_cgroup):
    """The worker outgrows the cgroup mid-cell and the kernel kills it: the
    cell is `oom` (the kernel log names the worker's pid), kept by
    --resume."""
    args = [*BENCH, *GROUP, "--out", str(tmp_path), "--network", "fcn8"]
    proc = start_in(memory_cgroup, *args, modes="fcn8=hog")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err  # its one job has no usable result
    run_dir = (tmp_path / "latest").resolve()
    found = result(run_dir, "fcn8")
    message = found["error"]["message"]
    assert memory_cgroup.oom_kills() >= 1  # the kernel killed the worker
    assert found["status"] == "oom", message
    assert found["error"]["type"] == "OutOfMemory"
    assert "its victim, as the kernel log says, was the harness" in message
    again = invoke(*args, "--resume")
    assert "1 of 1 jobs already done" in again.stdout, again.stdout
