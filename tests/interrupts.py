"""What a user's keyboard does to a sweep, as the Ctrl-C and pause tests
(natively and in containers) do it: Ctrl-C (SIGINT to the sweep's process
group), Ctrl-Z then `fg` (SIGSTOP, SIGCONT) past a cell's timeout."""
import os
import signal
import time

import processes
from dlrepro.run import store
from waits import said_first_timed, wait_for

# The last line of a sweep whose job a second Ctrl-C killed.
KILLED = "the running job was killed (Ctrl-C during its stop's grace)"


def ctrl_c(proc):
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends
    except ProcessLookupError:
        pass


def specs_done(run_dir):
    """Whether every cell fed so far (its spec file written) has its `ok`
    result on disk."""
    specs = list(run_dir.glob("*.spec.json"))
    return specs and all(
        (store.read_result(run_dir / spec.name.replace(".spec.json",
                                                       ".json"))[0]
         or {}).get("status") == "ok" for spec in specs)


def paused_past_the_timeout(proc, run_dir, timeout_s):
    """Pause the sweep `proc` (its process group, as Ctrl-Z does) once a
    cell is timing, until the cells it fed have ended and `timeout_s` more
    has passed; then go on (SIGCONT)."""
    wait_for(lambda: proc.poll() is not None or
             said_first_timed(*run_dir.glob("*.log")),
             what="a timed iteration")
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGSTOP)
    paused = time.monotonic()
    wait_for(lambda: processes.is_stopped(proc.pid), what="the pause")
    wait_for(lambda: specs_done(run_dir), seconds=300,
             what="the fed cells' results")
    # the pause itself: longer than the cell's timeout, which it contains
    wait_for(lambda: time.monotonic() - paused > timeout_s + 1,
             seconds=timeout_s + 60, what="the timeout to pass")
    os.killpg(proc.pid, signal.SIGCONT)
