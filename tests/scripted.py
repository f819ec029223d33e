"""The real command line with the scripted harness (tests/fake_harness.py
behind tests/bin/scripted-python, its mode chosen per network through
DLREPRO_FAKE_MODES): `invoke bench` run, started and read back, for the
fault, hostile-run and grouping tests."""
import json
from pathlib import Path

import fake_harness
from cli import env_for, invoke, start  # noqa: F401 (this module's callers')
from dlrepro.run import store
from paths import SCRIPTED

BENCH = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "3", "--warmup", "1",
         "--threads", "1"]
# A process per cell, named: what the fault tests were written for, while
# PyTorch's CPU cells fork by default (dlrepro.run.groups.FORK_DEFAULTS;
# fork's faults have tests of their own, test_fork_faults).
CELL = ["--isolation", "cell"]


def bench(out, *networks, modes="", extra=(), isolation=CELL):
    """The scripted sweep over `networks`, a process per cell unless
    `extra` names another mode (or `isolation=()`: each framework's
    default)."""
    args = BENCH + ["--out", str(out)] + [a for n in networks
                                          for a in ("--network", n)]
    mode = [] if "--isolation" in extra else isolation
    return invoke(*args, *mode, *extra, modes=modes)


def harness_pids(run_dir):
    """PIDs of processes whose command line names the run folder."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmdline and "scripted-python" in cmdline:
            pids.append(int(proc.name))
    return pids


def sweep_pids(run_dir):
    """Every process of a sweep on the run folder: its harness processes
    and its workers (a fork server's children too)."""
    from groupcells import worker_pids
    return sorted(set(harness_pids(run_dir)) | set(worker_pids(run_dir)))


def slow_steps(run_dir, network):
    """How many steps the cell of `network`, in mode slow, has begun."""
    try:
        log = (Path(run_dir) / f"pytorch-cpu-{network}-cpu-b16-t1.log"
               ).read_text()
    except FileNotFoundError:
        return 0
    return log.count(fake_harness.SLOW_STEP)


def statuses(run_dir):
    return {e["id"].split("-")[2]: e["status"]
            for e in store.read_run(run_dir)["jobs"]}


def row(text, network):
    """The report table's row of `network`, split into columns."""
    return next(line.split() for line in text.splitlines()
                if line.startswith("pytorch ") and line.split()[1] == network)


def started_at(run_dir, network):
    path = Path(run_dir) / f"pytorch-cpu-{network}-cpu-b16-t1.json"
    return json.loads(path.read_text())["started_at"], path.stat().st_mtime_ns


def one_line_error(proc):
    """A refusal as the CLI gives it: exit 2, one `error:` line, no
    traceback; the line."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and \
        proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


def fills_the_disk(bench, out):
    """fcn5, fcn8 (which fills the disk under `out`) and fcn-r through
    `bench`: one line that names --resume, exit 2; the run folder."""
    proc = bench(out, "fcn5", "fcn8", "fcn-r", modes="fcn8=fill-disk")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "is full" in proc.stderr and "--resume" in proc.stderr
    return (out / "latest").resolve()


def resumes_with_room(bench, out, run_dir):
    """The disk's filler removed, --resume through `bench` measures the
    rest and keeps fcn5's result as it was."""
    before = started_at(run_dir, "fcn5")
    (run_dir / "filler").unlink()
    again = bench(out, "fcn5", "fcn8", "fcn-r", extra=["--resume"])
    assert again.returncode == 0, again.stderr
    assert "1 of 3 jobs already done" in again.stdout, again.stdout
    assert started_at(run_dir, "fcn5") == before
    assert set(statuses(run_dir).values()) == {"ok"}
