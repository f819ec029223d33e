"""Faults a hostile user found, each reproduced on the real command line:
`invoke bench` with the native runtime and tests/bin/scripted-python as
the interpreter, whose harness is tests/fake_harness.py in a mode chosen
per network (DLREPRO_FAKE_MODES), so that processes, signals, files and
the run folder are all real and each case takes seconds."""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import memcgroup
from dlrepro.run import store
from paths import INVOKE, ROOT
from waits import wait_for

from scripted import (BENCH, CELL, bench, env_for, fills_the_disk,
                      harness_pids, invoke, resumes_with_room, row,
                      slow_steps, start, started_at, statuses)


def test_two_resumes_of_one_run_folder_exclude_each_other(tmp_path):
    """Fault 1: the second process gets a one-line error instead of
    measuring the same cell at the same time."""
    first = start(*BENCH, *CELL, "--out", str(tmp_path), "--network", "fcn8",
                  modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       harness_pids((tmp_path / "latest").resolve()) and
                       (tmp_path / "latest").resolve())
    second = bench(tmp_path, "fcn8", modes="fcn8=slow", extra=["--resume"])
    assert second.returncode == 2, second.stderr
    assert second.stderr.startswith(f"error: {run_dir} is being run by "
                                    f"process {first.pid}")
    assert second.stderr.count("\n") == 1
    os.killpg(first.pid, signal.SIGINT)
    first.wait(60)


def test_a_cell_killed_from_outside_is_an_error_and_measured_again(tmp_path):
    """Fault 2: kill -9 of the cell's own process was recorded as `oom`
    and never measured again."""
    proc = start(*BENCH, *CELL, "--out", str(tmp_path), "--network", "fcn8",
                 modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    pid = wait_for(lambda: harness_pids(run_dir))[0]
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(60) == 1  # its one job failed: nothing usable
    result = store.load_result(run_dir / "pytorch-cpu-fcn8-cpu-b16-t1.json")
    assert result["status"] == "error"
    assert "killed by SIGKILL from outside" in result["error"]["message"]
    again = bench(tmp_path, "fcn8", extra=["--resume"])
    assert "0 of 1 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"fcn8": "ok"}


def test_a_kill_after_a_result_keeps_it_for_report_and_resume(tmp_path):
    """Fault 3: `invoke bench` killed just after a cell wrote its valid
    result left run.json `pending`; report listed it pending and resume
    measured it again. The harness here kills its parent (the sweep) right
    after writing its result."""
    proc = bench(tmp_path, "fcn5", "fcn8", modes="fcn5=ok-kill-parent")
    assert proc.returncode == -signal.SIGKILL
    run_dir = (tmp_path / "latest").resolve()
    assert statuses(run_dir) == {"fcn5": "pending", "fcn8": "pending"}
    before = started_at(run_dir, "fcn5")
    report = invoke("report", "--out", str(tmp_path))
    assert report.returncode == 0, report.stderr
    assert row(report.stdout, "fcn5")[5] == "ok"
    assert report.stdout.splitlines()[0].endswith("(interrupted)")
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert started_at(run_dir, "fcn5") == before
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "ok"}


def test_a_full_disk_is_one_line_and_resume_keeps_what_was_measured(small_disk):
    """Fault 3: a full disk under --out gave an OSError traceback, left
    run.json `running` and a valid result listed `pending`, and resume
    measured it again."""
    run_dir = fills_the_disk(bench, small_disk)
    report = invoke("report", "--out", str(small_disk))
    assert row(report.stdout, "fcn5")[5] == "ok"
    resumes_with_room(bench, small_disk, run_dir)


def test_an_interpreter_without_the_framework_says_so(tmp_path, root):
    """Fault 4: the cell's message said "result failed schema validation";
    the real cause was only in the log."""
    python = "/usr/bin/python3"
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("/usr/bin/python3 has torch")
    args = ["bench", "--framework", "pytorch", "--runtime", "native",
            "--python", python, "--iterations", "2", "--warmup", "1",
            "--threads", "1", "--network", "fcn5", "--out", str(tmp_path)]
    proc = invoke(*args)
    assert proc.returncode == 1, proc.stderr  # its one job failed
    entry = store.read_run((tmp_path / "latest").resolve())["jobs"][0]
    assert "No module named 'torch'" in entry["message"], entry["message"]
    assert "schema" not in entry["message"]


def test_a_damaged_result_is_named_and_measured_again(tmp_path):
    """Fault 5: one truncated cell file made `report` refuse the whole run
    without naming it, and resume counted that cell as done."""
    assert bench(tmp_path, "fcn5", "fcn8").returncode == 0
    run_dir = (tmp_path / "latest").resolve()
    damaged = run_dir / "pytorch-cpu-fcn8-cpu-b16-t1.json"
    damaged.write_text(damaged.read_text()[:100])
    report = invoke("report", "--out", str(tmp_path))
    assert report.returncode == 0, report.stderr
    assert row(report.stdout, "fcn5")[5] == "ok"
    fcn8 = row(report.stdout, "fcn8")
    assert fcn8[5] == "error" and damaged.name[:30] in " ".join(fcn8)
    again = bench(tmp_path, "fcn5", "fcn8", extra=["--resume"])
    assert "1 of 2 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "ok"}


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden"])
def test_a_suite_name_that_is_not_a_folder_name(tmp_path, name):
    """Fault 6: a suite whose name held `/` or `..` gave a traceback."""
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "{name}"\n[[group]]\nnetworks = ["fcn5"]\n'
                     f'batch_sizes = [4]\n')
    proc = bench(tmp_path / "out", "fcn5", extra=["--suite", str(suite)])
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {suite}: `name` must be letters")
    assert proc.stderr.count("\n") == 1


def test_a_missing_interpreter_is_one_line(tmp_path):
    """Fault 6: --python /nonexistent gave a traceback."""
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", "/nonexistent", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == "error: --python /nonexistent: no such interpreter\n"


@pytest.mark.parametrize("content", ['[]', '{"schema_version": 2}',
                                     '{"schema_version": 2, "kind": "bench",'
                                     ' "jobs": [{"id": 1}]}'])
def test_a_run_json_of_the_wrong_shape_is_one_line(tmp_path, content):
    """Fault 6: valid JSON of the wrong shape gave a traceback."""
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(content)
    proc = invoke("report", "--run", str(run_dir))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith(f"error: {run_dir / 'run.json'}")
    assert proc.stderr.count("\n") == 1


def test_a_run_json_naming_files_outside_its_folder_is_refused(tmp_path):
    assert bench(tmp_path, "fcn5").returncode == 0
    run_dir = (tmp_path / "latest").resolve()
    record = json.loads((run_dir / "run.json").read_text())
    record["jobs"][0]["file"] = "../../etc/passwd"
    (run_dir / "run.json").write_text(json.dumps(record))
    proc = invoke("report", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "outside its run folder" in proc.stderr


def test_a_seed_that_is_not_a_number_is_one_line(tmp_path):
    """Fault 6: `converge --seed abc` gave a traceback."""
    proc = invoke("converge", "--framework", "pytorch", "--network", "fcn-r",
                  "--synthetic", "--seed", "abc", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == "error: --seed must be an integer >= 0, got 'abc'\n"


def test_ctrl_c_stops_the_cell_says_what_was_kept_and_exits_130(tmp_path):
    """Fault 7: Ctrl-C printed nothing and exited 1."""
    proc = start(*BENCH, *CELL, "--out", str(tmp_path), "--network", "fcn5",
                 "--network", "fcn8", modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    # fcn8 runs after fcn5, and run.json is written before either
    wait_for(lambda: slow_steps(run_dir, "fcn8") and
             statuses(run_dir)["fcn5"] == "ok")
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "kept 1 finished job(s)" in err and "--resume" in err
    assert "Traceback" not in err
    assert harness_pids(run_dir) == []
    record = store.read_run(run_dir)
    assert record["status"] == "interrupted"
    # the stopped cell kept the iterations it had measured
    stopped = store.load_result(run_dir / "pytorch-cpu-fcn8-cpu-b16-t1.json")
    assert stopped["error"]["type"] == "Terminated"


def _task_names():
    proc = subprocess.run([INVOKE, "--list"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return [line.split()[0] for line in proc.stdout.splitlines()[2:]
            if line.startswith("  ") and not line.startswith("    ")]


def test_every_task_has_a_working_help():
    """Fault 8: `invoke data --help` took `--help` as the dataset."""
    names = _task_names()
    assert {"bench", "converge", "data", "env", "render"} <= set(names)
    for name in names:
        proc = invoke(name, "--help")
        assert proc.returncode == 0, (name, proc.stderr)
        assert proc.stdout.startswith("Usage: inv[oke]"), (name, proc.stdout)


def test_a_host_allocation_failure_is_an_error_not_oom(tmp_path,
                                                       framework_python):
    """Fault 9: PyTorch's "DefaultCPUAllocator: can't allocate memory" was
    `oom`, which resume never retries; `oom` means the device ran out. A
    real allocation failure: the harness's address space capped with
    ulimit, a batch far past it."""
    capped = tmp_path / "capped-python"
    capped.write_text(f"#!/bin/sh\nulimit -v 3000000\n"
                      f"exec {framework_python('pytorch')} \"$@\"\n")
    capped.chmod(0o755)
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", str(capped), "--network", "fcn5",
                  "--batch-size", "200000", "--iterations", "2", "--warmup",
                  "1", "--threads", "1", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr  # its one job failed
    run_dir = (tmp_path / "out" / "latest").resolve()
    (entry,) = store.read_run(run_dir)["jobs"]
    assert entry["status"] == "error"
    assert "DefaultCPUAllocator: can't allocate memory" in entry["message"]


# Whether dlrepro can read the kernel log (here, as root) or not: without
# CAP_SYSLOG (kernel.dmesg_restrict is 1 here), or with an empty /dev/kmsg.
KNOWING = ["kernel-log", "no-cap-syslog", "empty-log"]


def _cannot_be_told(knowing):
    return "cannot be told: " + {
        "no-cap-syslog": "/dev/kmsg cannot be read (Operation not permitted)",
        "empty-log": "the kernel log names no victim"}[knowing]


def start_in(cgroup, knowing, *args, modes=""):
    """`invoke ARGS` in `cgroup`, seeing the kernel log or not."""
    if knowing == "no-cap-syslog" and \
            Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0: anyone may read the log")
    argv = [INVOKE, *args]
    if knowing == "no-cap-syslog":
        argv = ["setpriv", "--bounding-set", "-syslog", *argv]
    if knowing == "empty-log":
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind /dev/null /dev/kmsg && exec "$@"', "sh", *argv]
    return subprocess.Popen(argv, cwd=ROOT, env=env_for(modes),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=cgroup.enter)


@pytest.mark.parametrize("knowing", KNOWING)
def test_another_process_oom_killed_during_a_cell_is_not_its_oom(
        tmp_path, memory_cgroup, knowing):
    """Fault 7: a cell killed from outside was `oom`, and never measured
    again, when another process in dlrepro's memory cgroup was OOM-killed
    during the cell. Here a hog in the same cgroup as `invoke` is the
    kernel's victim, then the cell's harness is SIGKILLed from outside."""
    args = [*BENCH[:BENCH.index("--iterations")], "--iterations", "600",
            "--warmup", "0", "--threads", "1", "--out", str(tmp_path),
            "--network", "fcn8", *CELL]
    proc = start_in(memory_cgroup, knowing, *args, modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    pid = wait_for(lambda: harness_pids(run_dir))[0]
    hog = memory_cgroup.hog_killed_then_kill(pid)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err  # its one job failed
    result = store.load_result(run_dir / "pytorch-cpu-fcn8-cpu-b16-t1.json")
    message = result["error"]["message"]
    assert result["status"] == "error", message
    if knowing == "kernel-log":
        assert "killed by SIGKILL from outside; " in message
        assert memcgroup.names_victim(message, hog), message
        assert f"not the harness (pid {pid})" in message
    else:
        assert "by the OOM killer or from outside" in message
        assert _cannot_be_told(knowing) in message
    again = invoke(*args, "--resume")
    assert "0 of 1 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"fcn8": "ok"}


@pytest.mark.parametrize("knowing", KNOWING)
def test_a_cell_that_is_the_oom_killers_victim_is_oom(
        tmp_path, memory_cgroup, knowing):
    """The other side of fault 7: the cell's own process is the one the
    kernel kills (a harness that outgrows the cgroup) -> `oom`, kept by
    --resume; unless nothing can tell whose kill it was: then an error that
    says so, measured again."""
    proc = start_in(memory_cgroup, knowing, *BENCH, *CELL, "--out",
                    str(tmp_path), "--network", "fcn8", modes="fcn8=hog")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err  # its one job has no usable result
    run_dir = (tmp_path / "latest").resolve()
    result = store.load_result(run_dir / "pytorch-cpu-fcn8-cpu-b16-t1.json")
    message = result["error"]["message"]
    assert memory_cgroup.oom_kills() == 1  # the kernel killed the harness
    if knowing != "kernel-log":
        assert result["status"] == "error", message
        assert _cannot_be_told(knowing) in message
        return
    assert result["status"] == "oom", message
    assert result["error"]["type"] == "OutOfMemory"
    again = bench(tmp_path, "fcn8", extra=["--resume"])
    assert "1 of 1 jobs already done" in again.stdout, again.stdout
