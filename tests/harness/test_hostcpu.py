"""What the rest of the machine did while a cell was timed
(harness.hostcpu): /proc/stat read where the loop reads its own CPU time,
its arithmetic on written files, and a real neighbour that spins."""
import mmap
import os
import subprocess
import sys
import time

import pytest

from harness import hostcpu
from harness.timing import run_loop

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# user nice system idle iowait irq softirq steal guest guest_nice
STAT = """cpu  {} 10 {} {} 50 0 30 {} 70 0
cpu0 1 2 3 4 5 6 7 8 9 10
cpu1 1 2 3 4 5 6 7 8 9 10
intr 12345
"""


def proc_with(tmp_path, user, system, idle, steal):
    (tmp_path / "stat").write_text(STAT.format(user, system, idle, steal))
    return str(tmp_path)


def test_a_snapshot_counts_busy_idle_and_steal_in_seconds(tmp_path):
    snap = hostcpu.read(proc_with(tmp_path, 1000, 200, 5000, 40))
    # busy: user (guest already in it) + nice + system + irq + softirq
    assert snap.busy_s == pytest.approx((1000 + 10 + 200 + 0 + 30) * TICK_S)
    assert snap.idle_s == pytest.approx((5000 + 50) * TICK_S)
    assert snap.steal_s == pytest.approx(40 * TICK_S)
    assert snap.cpus == 2


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu  1 2 3\ncpu0 1\n",
                                  "cpu  1 2 3 4 5 6 7 8\n"])
def test_a_stat_file_it_cannot_read_gives_none(tmp_path, text):
    (tmp_path / "stat").write_text(text)
    assert hostcpu.read(str(tmp_path)) is None
    assert hostcpu.read(str(tmp_path / "absent")) is None


def test_the_block_is_the_hosts_time_less_the_process_own():
    start = hostcpu.Snapshot(10.0, busy_s=100.0, idle_s=50.0, steal_s=1.0,
                             cpus=4, own=None)
    end = hostcpu.Snapshot(12.5, busy_s=106.0, idle_s=52.0, steal_s=1.5,
                           cpus=4, own=None)
    assert hostcpu.window_block(start, end, own_cpu_s=4.5) == {
        "window_s": 2.5, "cpus": 4, "others_cpu_s": 1.5, "steal_s": 0.5,
        "idle_s": 2.0}
    # A tick below the process's own clock is nobody else's time.
    assert hostcpu.window_block(start, end, 6.01)["others_cpu_s"] == 0.0
    assert hostcpu.window_block(None, end, 1.0) is None
    assert hostcpu.window_block(start, end, None) is None


def test_the_process_counts_are_its_own_between_two_snapshots():
    def snapshot(*own):
        return hostcpu.Snapshot(0.0, 0.0, 0.0, 0.0, 1,
                                hostcpu.Counts(*own) if own else None)
    assert hostcpu.counts_block(snapshot(10, 1, 100, 7),
                                snapshot(25, 1, 130, 9)) == {
        "minor_faults": 15, "major_faults": 0, "voluntary_switches": 30,
        "involuntary_switches": 2}
    assert hostcpu.counts_block(snapshot(), snapshot(1, 1, 1, 1)) is None
    assert hostcpu.counts_block(None, snapshot(1, 1, 1, 1)) is None


def test_faults_while_timed_are_counted():
    """A step that maps fresh pages each time and writes one byte in
    each: as many minor faults at least as pages written while timed."""
    pages = 256

    def step():
        fresh = mmap.mmap(-1, pages * PAGE)
        for page in range(pages):
            fresh[page * PAGE] = 1
        fresh.close()
        return 1.0

    series = run_loop(step, iterations=4, warmup=1)
    counts = hostcpu.counts_block(series.host_start, series.host_end)
    assert counts["minor_faults"] >= 4 * pages * 0.9, counts


def block(window_s=10.0, cpus=2, others=0.0, steal=0.0, idle=0.0):
    return {"window_s": window_s, "cpus": cpus, "others_cpu_s": others,
            "steal_s": steal, "idle_s": idle}


@pytest.mark.parametrize("case,expected", [
    (block(others=5.0, idle=0.5), ["other processes used 0.50 of its 2"]),
    (block(others=5.0, idle=1.5), []),       # a CPU to spare most of the time
    (block(others=0.5, idle=0.0), []),       # nobody else worth naming
    (block(steal=1.0, idle=5.0), ["5% of this machine's CPU time"]),
    (block(steal=0.2, idle=5.0), []),
    (block(others=5.0, steal=2.0), ["0.50 of its 2", "steal while timed: 10%"]),
    # Too short to judge: a tick is already a hundredth of a second.
    (block(window_s=0.5, others=0.5, steal=0.5), []),
    (None, []),
])
def test_warnings_name_a_busy_host_and_steal(case, expected):
    found = hostcpu.warnings_for(case)
    assert len(found) == len(expected), found
    for text, part in zip(found, expected):
        assert part in text


def test_the_loop_reads_the_host_where_it_reads_its_own_time():
    events = []

    def step():
        events.append("step")
        return 1.0

    def host():
        events.append("host")
        return len(events)

    series = run_loop(step, iterations=2, warmup=2,
                      cpu_clock=lambda: events.append("cpu") or 0.0,
                      host_clock=host)
    assert events == ["step", "step", "host", "cpu", "step", "step", "cpu",
                      "host"]
    assert (series.host_start, series.host_end) == (3, 8)


def test_reading_the_host_is_no_part_of_an_iteration():
    now = [0.0]

    def step():
        now[0] += 1.0
        return 0.5

    def slow_host():
        now[0] += 100.0

    series = run_loop(step, iterations=3, warmup=1, clock=lambda: now[0],
                      host_clock=slow_host)
    assert series.warmup_s == [1.0] and series.times == [1.0, 1.0, 1.0]


def cpu_seconds(pid):
    fields = open("/proc/{}/stat".format(pid)).read().rsplit(")", 1)[1]
    utime, stime = fields.split()[11:13]
    return (int(utime) + int(stime)) * TICK_S


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux only")
def test_a_spinning_neighbour_shows_as_others_time():
    """A process that spins beside a loop that sleeps: the loop's block
    counts at least what the neighbour used meanwhile, as /proc/PID/stat
    says, within a tick a CPU at each end."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # Until it spins: its first tick of CPU time.
        while cpu_seconds(spinner.pid) == 0:
            time.sleep(0.01)
        before = cpu_seconds(spinner.pid)
        series = run_loop(lambda: time.sleep(0.05) or 1.0, iterations=20,
                          warmup=1)
        spun = cpu_seconds(spinner.pid) - before
    finally:
        spinner.kill()
        spinner.wait()
    found = hostcpu.window_block(series.host_start, series.host_end,
                                 series.cpu_s)
    slack = 2 * TICK_S * found["cpus"]
    assert spun > slack, "the neighbour never ran: nothing to compare"
    assert found["others_cpu_s"] >= spun - slack, (found, spun)
    assert found["window_s"] >= 20 * 0.05
    assert found["cpus"] == len([line for line in open("/proc/stat")
                                 if line[:3] == "cpu" and line[3].isdigit()])
