"""What a hostile user did to run folders (issue 23), each on the real
command line with tests/bin/scripted-python as the interpreter (see
tests/runs/test_faults.py): the folder lock, `latest`, damaged run.json and
result files, a disk full from the start, stale temp files, and paths that
exist but are not what they should be."""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from disks import fill
import processes
from paths import INVOKE, ROOT
from scripted import (BENCH, CELL, bench, harness_pids, invoke,
                      one_line_error, row, start, statuses)
from waits import wait_for

FCN5 = "pytorch-cpu-fcn5-cpu-b16-t1"
# A cell that measures for a minute unless stopped: long enough for the
# test to act while it runs, on a loaded machine; in a process of its own
# (harness_pids finds it).
LONG = list(BENCH) + CELL
LONG[LONG.index("--iterations") + 1] = "60"

# Loaded into the `invoke` process through PYTHONPATH: sends itself a
# signal at the n-th replacement of a run.json, that is while run.json is
# being (re)written, after its temp file is on disk.
SIGNAL_HOOK = '''
import os
_wanted = os.environ.get("DLREPRO_TEST_SIGNAL_AT_RUN_JSON")
if _wanted:
    _signum, _nth = (int(v) for v in _wanted.split(":"))
    _seen = [0]
    _replace = os.replace

    def _signalling_replace(src, dst, *args, **kwargs):
        if str(dst).endswith("run.json"):
            _seen[0] += 1
            if _seen[0] == _nth:
                os.kill(os.getpid(), _signum)
        return _replace(src, dst, *args, **kwargs)
    os.replace = _signalling_replace
'''


def bench_signalled_at_run_json(tmp_path, out, signum, nth, *networks):
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SIGNAL_HOOK)
    env = dict(os.environ, DLREPRO_FAKE_MODES="",
               DLREPRO_TEST_SIGNAL_AT_RUN_JSON=f"{signum}:{nth}",
               PYTHONPATH=os.pathsep.join(
                   [str(hook)] + [p for p in [os.environ.get("PYTHONPATH")]
                                  if p]))
    args = BENCH + ["--out", str(out)] + [a for n in networks
                                          for a in ("--network", n)]
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env,
                          preexec_fn=processes.sigint_at_default)


def run_folders_under(out):
    return sorted(p.name for p in Path(out).iterdir()
                  if p.is_dir() and not p.is_symlink())


def deeply_nested(depth=100000):
    return "[" * depth + "]" * depth


# --- item 5: the lock cannot be deleted from under its holder ---------------

def test_deleting_the_lock_file_lets_no_second_run_in(tmp_path):
    """Fault: with .lock deleted during a run, a --resume ran the same
    folder beside it (every cell measured twice at once) and `report`
    called the run interrupted."""
    first = start(*LONG, "--out", str(tmp_path), "--network", "fcn8",
                  modes="fcn8=slow")
    try:
        run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                           harness_pids((tmp_path / "latest").resolve()) and
                           (tmp_path / "latest").resolve())
        (run_dir / ".lock").unlink()
        report = invoke("report", "--out", str(tmp_path))
        assert report.returncode == 0, report.stderr
        assert report.stdout.splitlines()[0].endswith("(running)"), \
            report.stdout
        second = invoke(*LONG, "--out", str(tmp_path), "--network", "fcn8",
                        "--resume", modes="fcn8=slow")
        message = one_line_error(second)
        assert message.startswith(f"error: {run_dir} is being run by ")
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.wait(60)


# --- item 6: a .lock that is not a regular file -----------------------------

def make_symlink(lock, tmp_path):
    precious = tmp_path / "precious"
    precious.write_bytes(b"not yours to truncate\n")
    lock.symlink_to(precious)
    return precious


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "directory",
                                  "fifo"])
def test_a_lock_that_is_not_a_regular_file_is_one_line(tmp_path, kind):
    """Fault: a .lock symlink made --resume truncate and overwrite the file
    it pointed to; a .lock directory gave IsADirectoryError. Issue 42 item
    6: so did a .lock hard-linked to another file."""
    out = tmp_path / "out"
    assert bench(out, "fcn5").returncode == 0
    run_dir = (out / "latest").resolve()
    lock = run_dir / ".lock"
    lock.unlink()
    precious = None
    if kind == "symlink":
        precious = make_symlink(lock, tmp_path)
    elif kind == "hardlink":
        precious = tmp_path / "precious"
        precious.write_bytes(b"not yours to truncate\n")
        os.link(precious, lock)
    elif kind == "directory":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    proc = bench(out, "fcn5", extra=["--resume"])
    message = one_line_error(proc)
    wanted = ("a hard link to another file" if kind == "hardlink"
              else "not a regular file")
    assert str(lock) in message and wanted in message, message
    if precious is not None:
        assert precious.read_bytes() == b"not yours to truncate\n"


# --- item 9: what Ctrl-C says it kept; when `latest` moves ------------------

def test_ctrl_c_counts_a_result_written_just_before_it(tmp_path):
    """Fault: a result written just before Ctrl-C was on disk but the line
    said "kept 0". The harness here interrupts the sweep right after
    writing its valid result."""
    proc = bench(tmp_path, "fcn5", "fcn8", modes="fcn5=ok-interrupt-parent")
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "kept 1 finished job(s)" in proc.stderr, proc.stderr
    report = invoke("report", "--out", str(tmp_path))
    assert row(report.stdout, "fcn5")[5] == "ok"


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_a_new_run_stopped_before_its_run_json_leaves_latest_alone(
        tmp_path, signum):
    """Fault: a kill right after `latest` moved and before the new run.json
    existed left `latest` on an empty folder: report and --resume said
    there was no run. Here the sweep is signalled while it writes its
    first run.json."""
    out = tmp_path / "out"
    assert bench(out, "fcn5").returncode == 0
    previous = (out / "latest").resolve()
    proc = bench_signalled_at_run_json(tmp_path, out, signum, 1, "fcn5")
    assert proc.returncode in (-signal.SIGKILL, 130), proc.stderr
    assert (out / "latest").resolve() == previous
    report = invoke("report", "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(previous.name)
    if signum == signal.SIGINT:  # nothing of the new run is left behind
        assert run_folders_under(out) == [previous.name]
    again = bench(out, "fcn5", extra=["--resume"])
    assert "1 of 1 jobs already done" in again.stdout, again.stdout


# --- item 10: damaged run folders, a disk full from the start ---------------

def finished_run(out):
    assert bench(out, "fcn5").returncode == 0, "the first run failed"
    return (out / "latest").resolve()


def four_commands(out, tmp_path):
    return [invoke("report", "--out", str(out)),
            bench(out, "fcn5", extra=["--resume"]),
            invoke("compare", "--out", str(out)),
            invoke("export", "--out", str(out), "--csv",
                   str(tmp_path / "rows.csv"))]


def nest_run_json(record):
    return json.dumps(record)[:-1] + ', "deep": ' + deeply_nested() + "}"


def job_field(key, value):
    def change(record):
        record["jobs"][0][key] = value
        return json.dumps(record)
    return change


def record_field(key, value):
    def change(record):
        record[key] = value
        return json.dumps(record)
    return change


@pytest.mark.parametrize("change", [
    nest_run_json, job_field("id", ["a", "b"]), job_field("status", ["ok"]),
    record_field("resumed_at", "2026-12-01T00:00:00Z")],
    ids=["deeply-nested", "id-list", "status-list", "resumed-at-string"])
def test_a_damaged_run_json_is_one_line_everywhere(tmp_path, change):
    """Fault: RecursionError, TypeError and AttributeError tracebacks."""
    out = tmp_path / "out"
    run_json = finished_run(out) / "run.json"
    run_json.write_text(change(json.loads(run_json.read_text())))
    for proc in four_commands(out, tmp_path):
        assert str(run_json) in one_line_error(proc)


def test_a_deeply_nested_result_is_that_jobs_error(tmp_path):
    """Fault: a RecursionError traceback; a damaged result is shown as an
    error with the reason, and measured again by --resume."""
    out = tmp_path / "out"
    run_dir = finished_run(out)
    (run_dir / f"{FCN5}.json").write_text(deeply_nested())
    report, again, compare, export = four_commands(out, tmp_path)
    assert report.returncode == 0, report.stderr
    fcn5 = row(report.stdout, "fcn5")
    assert fcn5[5] == "error" and "unreadable" in " ".join(fcn5)
    for proc in (again, compare, export):
        assert proc.returncode == 0, proc.stderr
    assert "0 of 1 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {"fcn5": "ok"}


def test_a_disk_full_from_the_start_is_one_line_and_leaves_latest(
        small_disk):
    """Fault: an OSError traceback from the lock, and an empty run folder
    left behind."""
    previous = finished_run(small_disk)
    fill(small_disk)
    proc = bench(small_disk, "fcn5")
    assert "is full" in one_line_error(proc)
    assert (small_disk / "latest").resolve() == previous
    assert run_folders_under(small_disk) == [previous.name]
    report = invoke("report", "--out", str(small_disk))
    assert report.returncode == 0, report.stderr


# --- item 12: stale temp files; paths that are there but not files ----------

def test_a_temp_file_left_by_a_kill_is_removed_by_resume(tmp_path):
    """Fault: the .tmp-*.json of a run.json rewrite cut short by a kill
    stayed forever. Here the sweep is killed while it rewrites run.json
    after its first cell."""
    out = tmp_path / "out"
    proc = bench_signalled_at_run_json(tmp_path, out, signal.SIGKILL, 2,
                                       "fcn5", "fcn8")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    run_dir = (out / "latest").resolve()
    assert list(run_dir.glob(".tmp-*")), "the kill left no temp file"
    again = bench(out, "fcn5", "fcn8", extra=["--resume"])
    assert again.returncode == 0, again.stderr
    assert list(run_dir.glob(".tmp-*")) == []
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "ok"}


def test_a_suite_path_that_is_a_folder_is_not_a_regular_file(tmp_path):
    folder = tmp_path / "mine.toml"
    folder.mkdir()
    proc = invoke("bench", "--framework", "pytorch", "--suite", str(folder),
                  "--dry-run")
    assert one_line_error(proc) == \
        f"error: suite file {folder} is not a regular file\n"


def test_a_python_that_is_a_folder_is_not_an_interpreter(tmp_path):
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", str(tmp_path), "--out", str(tmp_path / "out"))
    assert one_line_error(proc) == \
        f"error: --python {tmp_path}: is not a regular file\n"


def test_a_data_folder_that_is_a_file_is_not_a_folder(tmp_path):
    data = tmp_path / "data"
    data.write_text("")
    proc = invoke("converge", "--framework", "pytorch", "--network", "fcn-r",
                  "--workers", "1", "--runtime", "native", "--data-dir",
                  str(data), "--out", str(tmp_path / "out"))
    message = one_line_error(proc)
    assert message.startswith(f"error: data folder {data} is not a folder")
    assert not (tmp_path / "out").exists()


def test_a_data_file_that_is_a_folder_is_not_called_missing(tmp_path):
    data = tmp_path / "data"
    first = data / "mnist" / "train-images-idx3-ubyte.gz"
    first.mkdir(parents=True)
    proc = invoke("converge", "--framework", "pytorch", "--network", "fcn-r",
                  "--workers", "1", "--runtime", "native", "--data-dir",
                  str(data), "--out", str(tmp_path / "out"))
    assert f"{first} (not a regular file)" in one_line_error(proc)
