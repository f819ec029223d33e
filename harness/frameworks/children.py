"""The processes a data-parallel launcher starts (torchrun, mpirun, a
worker per node): started so that they die with the harness, their stderr
forwarded, their failure said in their most telling line, stopped with a
grace. Standard library only."""
import collections
import os
import re
import signal
import subprocess
import sys
import threading

from .. import procstat

# The convergence process's pid, in its launcher's workers' environment
# (worker_env): a worker whose launcher ended before the worker could ask
# to die with it finds the harness gone from its ancestors and ends. It
# happens: torchrun SIGTERMed while it starts its workers ends without
# stopping the ones it already started.
HARNESS_PID_ENV = "DLREPRO_HARNESS_PID"


def die_with_this_process():
    """A preexec_fn for launchers (torchrun, mpirun): SIGTERM the child when
    this process dies, even by SIGKILL, so no workers run on (Linux;
    elsewhere a no-op). A child whose parent died between its fork and the
    request ends at once: the request would never fire."""
    parent = os.getpid()
    return lambda: procstat.die_with_parent(parent)


def stay_with_launcher(environ=None):
    """In a launched worker: SIGTERM when its launcher dies; and end now
    (SystemExit) when the harness that started the launcher is no longer
    among this process's ancestors, i.e. the launcher or the harness ended
    before this request could."""
    environ = os.environ if environ is None else environ
    procstat.signal_when_parent_dies()
    harness = environ.get(HARNESS_PID_ENV, "")
    if harness.isdigit() and procstat.is_ancestor(int(harness)) is False:
        raise SystemExit("harness: error: the harness that launched this "
                         "worker (process {}) has ended; so does the "
                         "worker".format(harness))


# A glog/absl line's prefix: severity, date, time, thread, file:line].
_LOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [^\]]+\] ")


def run_child(command, env, what, on_start=None):
    """Run a worker process with its stderr forwarded to ours; a failure
    (status or signal: frameworks that abort on a lost peer) is a
    RuntimeError naming `what` and the child's most telling line.
    on_start(process), when given, sees the process once it runs."""
    tail = collections.deque(maxlen=200)
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE,
                               universal_newlines=True,
                               start_new_session=True,
                               preexec_fn=die_with_this_process())
    if on_start is not None:
        on_start(process)
    pump = threading.Thread(target=_pump, args=(process.stderr, tail))
    pump.daemon = True
    pump.start()
    try:
        status = process.wait()
    except BaseException:
        # SIGTERM from the host's timeout, or Ctrl-C: take the child down.
        stop(process)
        raise
    pump.join(5)
    if status != 0:
        ended = "exited with status {}".format(status) if status > 0 else \
            "was killed by signal {}".format(_signal_name(-status))
        raise RuntimeError("{} {}: {}".format(what, ended, telling(tail)))


def _pump(stream, tail):
    for line in iter(stream.readline, ""):
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line.rstrip())
    stream.close()


# "RuntimeError: ...", "torch.distributed.DistStoreError: ...".
# An exception with a message: torchrun's closing ChildFailedError has none
# (the worker's own error came before it).
_EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception)\b: *\S")


def telling(lines):
    """The line of a failed worker's log that says most: a fatal log line,
    else the last exception, else the last line naming an error (not a
    link to a page about errors), else the last line."""
    lines = [l.strip() for l in lines if l.strip()]
    fatal = [l for l in lines if l.startswith("F") and _LOG_PREFIX.match(l)]
    raised = [l for l in lines if _EXCEPTION.search(l)]
    errors = [l for l in lines if ("Error" in l or "error" in l or
                                   "Failed" in l) and "http" not in l]
    line = (fatal or raised[-1:] or errors[-1:] or lines[-1:] or
            ["no output"])[0]
    return _LOG_PREFIX.sub("", line)


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


# How long stopped workers get to save what they measured before SIGKILL:
# well inside the grace the harness itself gets from whatever stops it
# (a container runtime's stop, 10 s; Slurm's KillWait, 30 s here), so that
# the harness still writes its partial result after a worker that cannot
# take the signal (one blocked in a collective on a lost peer) is killed.
# A responsive worker saves in milliseconds.
CHILD_STOP_GRACE_S = 4


def stop(process):
    """SIGTERM to the process's group, SIGKILL after CHILD_STOP_GRACE_S."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(CHILD_STOP_GRACE_S)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass


def refuse_taken_port(cluster, what):
    """On node 0, a RuntimeError saying `what` cannot start when the
    cluster's rendezvous port is taken (before a framework waits on it)."""
    if cluster["node_rank"] == 0:
        taken = port_taken(cluster["coordinator"], cluster["port"])
        if taken:
            raise RuntimeError("{}: {}".format(what, taken))


def port_taken(host, port):
    """': port P of HOST is in use' when it cannot be bound now, else ''
    (a framework that aborts on a taken port says nothing clearer)."""
    import socket
    probe = socket.socket()
    try:
        probe.bind((host, port))
    except (OSError, socket.error):
        return "port {} of {} is in use (address already in use)".format(
            port, host)
    finally:
        probe.close()
    return ""
