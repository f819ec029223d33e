"""The timing loop: raw seconds and losses per iteration, and the CPU time
(the process's own and the whole machine's) around the timed ones."""
import math
import sys
import time

from . import hostcpu

# Said on stderr (the job's log) once one timed iteration is done: from then
# on a run cut short keeps a measured iteration. Tests wait for this line
# instead of sleeping for a time that is too long on a fast machine and too
# short on a loaded one.
FIRST_TIMED = "timing: the first timed iteration is done"


def say_when_first(timed_count):
    """FIRST_TIMED on stderr when `timed_count`, the timed iterations done
    so far, is 1; whether it said it (the caller keeps the write out of the
    next iteration's time)."""
    if timed_count != 1:
        return False
    sys.stderr.write(FIRST_TIMED + "\n")
    sys.stderr.flush()
    return True


class Series(object):
    """What a loop has measured so far. Filled in place, so that a caller
    still holds every completed iteration when the loop is interrupted."""

    def __init__(self):
        self.warmup_s = []
        self.warmup_loss = []
        self.times = []
        self.losses = []
        self.diverged_at = None
        # Process CPU seconds over the timed iterations (all threads): with
        # the wall time it shows how many cores the framework really used.
        self.cpu_s = None
        # The host's CPU time and the process's faults and switches at the
        # same two points (harness.hostcpu.Snapshot).
        self.host_start = None
        self.host_end = None


def run_loop(step, iterations, warmup, series=None, clock=time.perf_counter,
             cpu_clock=time.process_time, host_clock=hostcpu.read):
    """Call `step()` warmup + iterations times and record each iteration.

    `step` runs one full training iteration and returns the loss as a float;
    returning the float means the device has finished (the backends
    synchronize before reading it), so consecutive clock readings bound real
    work. The time of iteration i is the interval between the end of
    iteration i-1 and the end of iteration i: the paper's "time between two
    consecutive training iterations". A loss that is NaN or infinite stops
    the loop and sets `diverged_at`.
    """
    if series is None:
        series = Series()

    def window_starts():
        # The host's and the process's CPU readings, always as a pair.
        series.host_start = host_clock()
        return cpu_clock()

    cpu_start = window_starts() if warmup == 0 else None
    previous = clock()
    try:
        for i in range(warmup + iterations):
            loss = step()
            now = clock()
            if i < warmup:
                series.warmup_s.append(now - previous)
                series.warmup_loss.append(loss)
            else:
                series.times.append(now - previous)
                series.losses.append(loss)
                if say_when_first(len(series.times)):
                    now = clock()  # the line is no part of the next iteration
            previous = now
            if i == warmup - 1:
                cpu_start = window_starts()
                previous = clock()  # the reads are no part of an iteration
            if math.isnan(loss) or math.isinf(loss):
                series.diverged_at = i
                break
    finally:
        if cpu_start is not None:
            series.cpu_s = cpu_clock() - cpu_start
            series.host_end = host_clock()
    return series
