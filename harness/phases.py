"""Where a run's time went: the moments its phases ended, as seconds since
the Unix epoch (the host's clock too, so the host can place them inside
the job's own start and end).

A result's `phases` block holds every phase of its mode, null until
reached: a run that fails keeps the phases it reached. Pure but for the
clock and /proc: the host reads the names and order from here.
"""
import os
import time

from . import procstat

# In the order they happen in a throughput cell (harness.throughput): the
# GPUs' NVML inventory and compatibility gate come before the framework is
# imported (a stack that cannot run must not be started), and a framework
# that creates its CUDA context lazily does so while the model is built.
THROUGHPUT = ("process_start", "harness_ready", "device_ready",
              "framework_imported", "model_built", "warmup_done",
              "timed_done", "result_written")
# Convergence runs (harness.converge): the framework is imported, the model
# built and every epoch trained and evaluated inside the framework's
# train(), which reports iteration times but no moments.
CONVERGENCE = ("process_start", "harness_ready", "data_loaded",
               "device_ready", "trained", "result_written")
# Every phase name in one order, for readers of either mode.
ORDER = ("process_start", "harness_ready", "data_loaded", "device_ready",
         "framework_imported", "model_built", "warmup_done", "timed_done",
         "trained", "result_written")


# A forked child's start: its fork, on the clock of every other phase.
# /proc's start time counts clock ticks (10 ms) and is placed on the wall
# clock through /proc/uptime (10 ms again): a child forked within 20 ms of
# its server's import would seem to start before it.
_forked_at = None


def forked_now():
    """This process is a child forked now (harness.forkserver)."""
    global _forked_at
    _forked_at = round(time.time(), 3)


def process_start(now=None, proc="/proc"):
    """When this process started, in epoch seconds, so that the
    interpreter's own start-up counts: /proc/self/stat's start time (clock
    ticks since boot) placed on the wall clock through /proc/uptime. None
    where /proc does not say (not Linux). A forked child's: its fork."""
    if _forked_at is not None:
        return _forked_at
    try:
        ticks = int(procstat.stat_fields("self", proc)[19])
        with open(os.path.join(proc, "uptime")) as handle:
            uptime = float(handle.read().split()[0])
        hertz = os.sysconf("SC_CLK_TCK")
    except (IOError, OSError, ValueError, IndexError, AttributeError):
        return None
    now = time.time() if now is None else now
    return round(now - uptime + float(ticks) / hertz, 3)


def new_block(names, now=None):
    """A phases block for the phase `names` of a mode: the process's start
    and the harness ready now, the rest null until stamped."""
    block = dict((name, None) for name in names)
    block["process_start"] = process_start()
    mark(block, "harness_ready", now)
    return block


def mark(block, name, now=None):
    """The phase `name` of `block` ended now (to the millisecond)."""
    block[name] = round(time.time() if now is None else now, 3)


def stamp(result, name, now=None):
    """The phase `name` of `result` ended now. A result without a phases
    block (built by the host, or by an older harness) is left alone."""
    block = result.get("phases")
    if isinstance(block, dict):
        mark(block, name, now)


def stamp_after(step, count, result, name):
    """`step` that stamps `name` as the call after the first `count` begins:
    the end of the warm-up is the start of the first timed iteration."""
    calls = [0]

    def counted():
        if calls[0] == count:
            stamp(result, name)
        calls[0] += 1
        return step()
    return counted
