"""The timing loop with a fake clock: exact intervals, no sleeping; and
the line in a job's log that says timing has begun."""
import math
import subprocess

import pytest

from harness.timing import FIRST_TIMED, Series, run_loop
from paths import INVOKE, ROOT, SCRIPTED


class FakeClock:
    """Advances by the given durations as the loop's steps run."""

    def __init__(self, durations):
        self.now = 100.0
        self.durations = list(durations)

    def __call__(self):
        return self.now

    def step(self, loss=1.0):
        self.now += self.durations.pop(0)
        return loss


def test_intervals_between_consecutive_iterations():
    clock = FakeClock([0.5, 0.4, 0.1, 0.2, 0.3])
    series = run_loop(clock.step, iterations=3, warmup=2, clock=clock,
                      cpu_clock=lambda: 0.0)
    assert series.warmup_s == pytest.approx([0.5, 0.4])
    assert series.times == pytest.approx([0.1, 0.2, 0.3])
    assert series.losses == [1.0, 1.0, 1.0]
    assert series.diverged_at is None


def test_cpu_time_covers_timed_iterations_only():
    clock = FakeClock([1.0] * 4)
    cpu = iter([5.0, 7.5])  # read after warm-up, then at the end
    series = run_loop(clock.step, iterations=2, warmup=2, clock=clock,
                      cpu_clock=lambda: next(cpu))
    assert series.cpu_s == 2.5


def test_nan_loss_stops_the_loop():
    clock = FakeClock([0.1] * 10)
    losses = iter([2.0, 1.5, float("nan"), 1.0])
    series = run_loop(lambda: clock.step(next(losses)), iterations=5,
                      warmup=1, clock=clock, cpu_clock=lambda: 0.0)
    assert series.diverged_at == 2
    assert len(series.times) == 2 and math.isnan(series.losses[-1])


def test_interrupted_loop_keeps_completed_iterations():
    clock = FakeClock([0.1] * 10)
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return clock.step()

    series = Series()
    with pytest.raises(KeyboardInterrupt):
        run_loop(step, iterations=5, warmup=1, series=series, clock=clock,
                 cpu_clock=lambda: 0.0)
    assert series.times == pytest.approx([0.1, 0.1])
    assert series.cpu_s == 0.0


def test_the_log_says_once_when_the_first_timed_iteration_is_done(tmp_path):
    """What tests (and a user tailing the log) wait for instead of
    sleeping: one line, after the warm-up, on the real command line."""
    proc = subprocess.run(
        [INVOKE, "bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--network", "fcn5", "--iterations", "3",
         "--warmup", "2", "--threads", "1", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The job's log (PyTorch forks by default: its server's log is beside)
    log, = [p for p in (tmp_path / "latest").glob("*.log")
            if not p.name.endswith(".worker.log")]
    assert log.read_text().count(FIRST_TIMED) == 1, log.read_text()


def test_the_first_timed_iteration_is_said_after_the_warmup(capfd):
    clock = FakeClock([0.5] * 4)

    def step():
        if len(clock.durations) > 2:  # a warm-up step
            assert FIRST_TIMED not in capfd.readouterr().err
        return clock.step()
    run_loop(step, iterations=2, warmup=2, clock=clock)
    assert capfd.readouterr().err == FIRST_TIMED + "\n"



def test_saying_the_first_timed_iteration_is_no_part_of_any(monkeypatch):
    """The line's write (slow here: 100 s on the fake clock) is kept out of
    every iteration's time; each step takes 1 s."""
    now = [0.0]

    class SlowStderr(object):
        def write(self, text):
            now[0] += 100.0

        def flush(self):
            pass

    def step():
        now[0] += 1.0
        return 0.5

    monkeypatch.setattr("sys.stderr", SlowStderr())
    series = run_loop(step, warmup=1, iterations=3, clock=lambda: now[0])
    assert series.times == [1.0, 1.0, 1.0]
