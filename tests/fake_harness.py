"""A harness process with scripted behaviour, for testing the sweep with
real processes, real signals and real timeouts.

    python tests/fake_harness.py MODE --spec SPEC --out RESULT

Modes: ok (the real harness.throughput with a scripted backend), slow (the
real harness.throughput, one second per iteration: for timeouts and SIGTERM), stubborn
(ignores SIGTERM, never writes), crash (exit 3, no result), kill (SIGKILL
itself, as the OOM killer would), ok-kill-server (ok, then SIGKILL the fork
server that forked it), invalid (writes a file that breaks the
schema), torn-clocks (ok, but leaves a torn GPU clock-state file),
ok-kill-parent (ok, then SIGKILL the sweep), ok-interrupt-parent (ok,
then SIGINT the sweep, as a Ctrl-C just after the result), fill-disk
(fills the results' filesystem, exits 1 without a result), hog (allocates memory until the
kernel kills it, as a cell bigger than its memory limit does; gives up with
exit 4 at 4 GiB, so that a machine without a limit is not starved),
ok@SECONDS (ok, each iteration taking SECONDS: a history with a step),
sleep@SECONDS (ok, each iteration sleeping SECONDS of real time: a cell
that is still measuring when a test acts on the sweep),
oom (the real harness.throughput, the device out of memory at the second
step: status `oom`), litter-MODE (a file left in the process's temp dir,
as frameworks leave some, then MODE), oom-in-group and hog-in-group (ok
here, alone; see `worker`).
`worker` (below) is `python -m harness worker` with these cells.
"""
import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import frameworks, procstat, throughput  # noqa: E402
from tests.fake_backend import Backend, Script  # noqa: E402


SLOW_STEP = "fake harness: slow step\n"


class SleepingScript(Script):
    def clock(self):
        return time.monotonic()


def gpu_capable(backend):
    """`backend`, taking `gpu` cells too: it computes them as `cpu` ones,
    and the fake NVML (where a test puts it on PYTHONPATH) is the GPU."""
    backend.DEVICES = ("cpu", "gpu")
    return backend


def run_scripted(mode, spec, out, isolation=None, group_clocks=None):
    """The real harness.throughput.run_cell with a scripted backend: ok
    (0.01 s an iteration), ok@SECONDS, or slow; `gpu` cells are computed
    as `cpu` ones (NVML is the fake's, where a test gives it)."""
    seconds, pause = 0.01, 1.0
    if mode.startswith("ok@"):
        mode, seconds = "ok", float(mode[3:])
    if mode.startswith("sleep@"):
        mode, pause = "slow", float(mode[6:])
    n = spec["cell"]["warmup"] + spec["cell"]["iterations"]
    if mode == "oom":
        script = Script([seconds] * n, raise_at=2, exc=MemoryError(
            "CUDA out of memory (scripted)"))
        frameworks.load = lambda name, part="backend": gpu_capable(
            Backend(script))
        return throughput.run_cell(spec, out, clock=script.clock,
                                   isolation=isolation,
                                   group_clocks=group_clocks)
    if mode == "ok":
        script = Script([seconds] * n)
        frameworks.load = lambda name, part="backend": gpu_capable(
            Backend(script))
        return throughput.run_cell(spec, out, clock=script.clock,
                                   isolation=isolation,
                                   group_clocks=group_clocks)
    script = SleepingScript([0.0] * n)
    backend_step = Backend(script).prepare

    class Slow(Backend):
        def prepare(self, *args, **kwargs):
            session = backend_step(*args, **kwargs)
            step = session.step

            def slow_step():
                # A line a test can wait for: the cell is measuring
                # (its SIGTERM handler is in place).
                sys.stderr.write(SLOW_STEP)
                sys.stderr.flush()
                time.sleep(pause)
                return step()
            session.step = slow_step
            return session
    frameworks.load = lambda name, part="backend": gpu_capable(Slow(script))
    return throughput.run_cell(spec, out, clock=script.clock,
                               isolation=isolation, group_clocks=group_clocks)


def hog():
    """Allocate until the kernel's OOM killer ends this process (picked
    first: oom_score_adj 1000); exit 4 at 4 GiB, should no limit hold it."""
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")
    held = []
    for _ in range(4 * 1024 // 16):
        held.append(b"\1" * (16 << 20))  # 16 MiB, every page touched
        time.sleep(0.01)
    sys.stderr.write("hog: 4 GiB and still alive: no memory limit\n")
    sys.stderr.flush()
    os._exit(4)


def in_group_only(mode, isolation):
    """The mode of a cell in mode oom-in-group or hog-in-group: oom (as
    above) or hog (the kernel kills the worker) when the cell is not the
    first of its worker, whose allocators still hold the cells before it;
    ok when it is."""
    if mode in ("oom-in-group", "hog-in-group"):
        return mode[:3] if isolation["position"] > 1 else "ok"
    return mode


def worker(modes, fork=False):
    """`python -m harness worker` (the real one; with `fork` the real fork
    server, importing no framework, which says before each fork what it
    holds: fork_checked), each cell in the mode
    `modes` maps its network to, as `run` runs it (cell below): a mode that
    ends `run`'s process (crash, kill, hog, fill-disk, stubborn) ends the
    worker mid-cell with the same status; oom-in-group and hog-in-group
    (in_group_only) only when the cell is not its worker's first."""
    from harness import worker as worker_mod

    def run_cell(spec, out, isolation=None, group_clocks=None):
        mode = in_group_only(modes.get(spec["cell"]["network"], "ok"),
                             isolation)
        if mode == "hog":
            hog()
        ended = cell(mode, spec, out, isolation, group_clocks)
        if isinstance(ended, dict):
            return ended
        sys.stderr.flush()
        os._exit(ended)
    worker_mod.run_cell = run_cell
    if fork:
        from harness import forkserver
        forkserver.PRELOAD = {}
        forkserver.run_argv = lambda spec_path, out: [
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                         "scripted-python"), "-s", "-m", "harness", "run",
            "--spec", spec_path, "--out", out]
        if os.environ.get("DLREPRO_FAKE_SERVER_THREAD"):
            # a thread in the server, as a framework's pool would start one:
            # no cell may be forked then
            import threading
            threading.Thread(target=threading.Event().wait,
                             daemon=True).start()
        forkserver.ForkServer._fork = fork_checked(forkserver.ForkServer._fork)
        return forkserver.serve(sys.stdin, worker_mod.protocol_stream())
    return worker_mod.serve(sys.stdin, worker_mod.protocol_stream())


FORK_CHECK = "fake harness: before a fork: "


def fork_checked(fork):
    """The fork server's fork, which first writes to the log what the
    server holds: its threads, its NVML sessions (harness.gpu.nvml's count,
    and the fake NVML's own where a test gives it one), so that a test
    fails if the server ever holds a device across a fork."""
    def checked(self, spec, cell, out, isolation, temp):
        from harness import forkserver
        from harness.gpu import nvml
        held = {"threads": forkserver.thread_count(),
                "nvml_sessions": nvml.sessions_open(),
                "refusal": forkserver.fork_refusal(cell["framework"])}
        if os.environ.get("FAKE_NVML_STATE"):
            # The file the fake NVML shares, as the children left it.
            with open(os.environ["FAKE_NVML_STATE"]) as handle:
                held["fake_nvml_initialised"] = json.load(handle)[
                    "initialised"]
        sys.stderr.write(FORK_CHECK + json.dumps(held, sort_keys=True) + "\n")
        sys.stderr.flush()
        return fork(self, spec, cell, out, isolation, temp)
    return checked


def sweep_pid(isolation):
    """The sweep's pid: this process's parent, or a forked cell's server's
    parent (--isolation fork)."""
    if (isolation or {}).get("mode") != "fork":
        return os.getppid()
    return procstat.parent_of(os.getppid())


def main(mode, spec_path, out):
    ended = cell(mode, json.load(open(spec_path)), out)
    return 0 if isinstance(ended, dict) else ended


def cell(mode, spec, out, isolation=None, group_clocks=None):
    """One cell in `mode`: its result when it ends as a cell does, else the
    status its process exits with."""
    # Why this is long: one branch per scripted mode, read as one table of
    # the ways a harness process can end.
    if mode.startswith("litter-"):
        tempfile.mkstemp(prefix="fake-framework-")
        mode = mode[len("litter-"):]
    if mode == "torn-clocks":
        # a clock-state file cut short, as a SIGKILL mid-write could leave it
        with open(os.path.join(os.path.dirname(out),
                               spec["clock_state"]), "w") as handle:
            handle.write('{"format": ')
        mode = "ok"
    if mode == "ok-kill-parent":
        # a sweep killed just after a cell wrote its valid result
        result = cell("ok", spec, out, isolation, group_clocks)
        os.kill(sweep_pid(isolation), signal.SIGKILL)
        return result
    if mode == "ok-interrupt-parent":
        # a Ctrl-C that reaches the sweep just after a cell wrote its result
        result = cell("ok", spec, out, isolation, group_clocks)
        os.kill(sweep_pid(isolation), signal.SIGINT)
        return result
    if mode == "ok-kill-server":
        # a fork server killed just after its child wrote a valid result
        result = cell("ok", spec, out, isolation, group_clocks)
        os.kill(os.getppid(), signal.SIGKILL)
        return result
    if mode == "fill-disk":
        # the results' filesystem fills up while the cell runs
        with open(os.path.join(os.path.dirname(out), "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        return 1
    if mode in ("oom-in-group", "hog-in-group"):
        mode = "ok"  # alone, the cell fits
    if mode.startswith(("ok@", "sleep@")) or mode in ("ok", "slow", "oom"):
        return run_scripted(mode, spec, out, isolation, group_clocks)
    if mode == "hog":
        held = []
        for _ in range(4 * 1024 // 16):
            held.append(b"\1" * (16 << 20))  # 16 MiB, every page touched
            time.sleep(0.01)
        sys.stderr.write("hog: 4 GiB and still alive: no memory limit\n")
        return 4
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:  # hung until SIGKILL: no time of its own to run out
            signal.pause()
    if mode == "crash":
        sys.stderr.write("boom: the framework crashed\n")
        return 3
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "invalid":
        result = {"schema_version": 1, "status": "ok"}
        with open(out, "w") as handle:
            json.dump(result, handle)
        return result
    raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[3], sys.argv[5]))
