"""The real command line with the scripted harness (tests/fake_harness.py
behind tests/bin/scripted-python, its mode chosen per network through
DLREPRO_FAKE_MODES): `invoke bench` run, started and read back, for the
fault, hostile-run and grouping tests."""
import json
import os
import subprocess
from pathlib import Path

import fake_harness
import processes
from dlrepro.run import store
from paths import INVOKE, ROOT, SCRIPTED

BENCH = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "3", "--warmup", "1",
         "--threads", "1"]


def env_for(modes):
    return dict(os.environ, DLREPRO_FAKE_MODES=modes)


def invoke(*args, modes="", timeout=120):
    # SIGINT at its default: a fake mode interrupts the sweep, and a runner
    # started in the background would hand the sweep SIGINT ignored.
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env_for(modes),
                          preexec_fn=processes.sigint_at_default)


def start(*args, modes=""):
    return processes.start([INVOKE, *args], cwd=ROOT, env=env_for(modes),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)


def bench(out, *networks, modes="", extra=()):
    args = BENCH + ["--out", str(out)] + [a for n in networks
                                          for a in ("--network", n)]
    return invoke(*args, *extra, modes=modes)


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
