"""Waiting for an event (a line in a log, a file, a state), never for a
fixed time: a fixed sleep is too long on a fast machine and too short on a
loaded one. Every bound here is generous; reaching one fails the test."""
import time
from pathlib import Path

from harness.timing import FIRST_TIMED


def wait_for(predicate, seconds=120, every=0.1, what="the event"):
    """predicate()'s first true value, polled every `every` seconds for at
    most `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(every)


def wait_while_running(proc, predicate, seconds, every=0.2,
                       what="the event"):
    """predicate()'s first true value while `proc` (a Popen with its
    output on a pipe) runs; its output in the failure if it ends first,
    instead of waiting out the bound for what can no longer come."""
    def running_and_true():
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the run ended (status {proc.returncode}) "
                                 f"before {what}: {output[-3000:]}")
        return predicate()
    return wait_for(running_and_true, seconds, every, what)


def later_second(than):
    """Once the clock's whole second (int(time.time())) is past `than`: a
    run's start is stamped to the second, and runs that must have an order
    (history orders runs by it) must not share one."""
    wait_for(lambda: int(time.time()) > than, 5, 0.01, what="the next second")


def text_of(path):
    """A log as written so far; empty while it does not exist."""
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def said_first_timed(*logs):
    """Whether a harness writing one of `logs` has finished a timed
    iteration (harness.timing.FIRST_TIMED)."""
    return any(FIRST_TIMED in text_of(log) for log in logs)


def first_timed_iteration(log, proc=None, seconds=300):
    """Wait until the harness writing `log` has finished a timed iteration
    (harness.timing.FIRST_TIMED); fail at once, with the log, should `proc`
    end first."""
    def said():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ended ({proc.returncode}) before a timed "
                                 f"iteration: {text_of(log)}")
        return said_first_timed(log)
    wait_for(said, seconds, what=f"a timed iteration in {log}")


def launched_curves(log):
    """The workers' curves file once the harness's log names it (the
    `--out CURVES` of its launch line); else None."""
    text = text_of(log)
    if "launching: " in text and " --out " in text:
        return Path(text.split("launching: ", 1)[1].split(
            " --out ", 1)[1].split()[0])
    return None
