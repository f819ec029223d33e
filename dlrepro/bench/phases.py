"""Where a sweep's time went: how much of it measured iterations, and what
the rest was spent on, per framework.

A job's wall time runs from its run.json entry's start (the runtime
launching it) to its end (its result collected), or, for a job a Slurm
task ran, over the window its node side measured (run.json's stamps there
are the submitting side's polls); inside it, its result's
`phases` block (harness.phases) says when each phase of the harness
ended. Each stretch between two moments is named after the phase that
ended it. A sweep's wall time runs from its first job's start to its last
job's end (in each session of a resumed run); what no job covers is the
gaps between jobs. Pure: callers print the lines.
"""
import datetime
import statistics
from dataclasses import dataclass, field

from harness import phases as harness_phases

from dlrepro.run import nodeenv

# The stretch ending at each moment, by name; "end" is the job's end.
NAMES = {
    "process_start": "before the process",
    "harness_ready": "interpreter",
    "data_loaded": "data",
    "device_ready": "device",
    "framework_imported": "import",
    "model_built": "model build",
    "warmup_done": "warm-up",
    "timed_done": "timed",
    "trained": "training",
    "result_written": "write, exit and collect",
    "end": "write, exit and collect",
    # A fork server's own start and import (--isolation fork), inside the
    # window of the job that started it, before its first child's start.
    "server_start": "before the process",
    "server_ready": "fork server: interpreter and import",
}
MEASURED = ("warm-up", "timed")
# Run.json's stamps are cut to the second: two windows closer than this
# may overlap by rounding alone.
STAMP_S = 1.0
GAPS = "gaps between jobs"
UNPHASED = "jobs without phase times"
OTHERS = "other frameworks' jobs"


@dataclass
class Sweep:
    """One framework's part of a sweep, in seconds."""
    framework: str
    wall_s: float = 0.0
    spent: dict = field(default_factory=dict)   # stretch name -> seconds
    fixed_s: list = field(default_factory=list)  # per ok job with phases
    jobs: int = 0
    unphased: int = 0
    overlap_s: float = 0.0    # its jobs' windows over the sweep's window
    moved: list = field(default_factory=list)  # clock offsets, s, moved

    @property
    def measured_s(self):
        return sum(self.spent.get(name, 0.0) for name in MEASURED)

    @property
    def own_s(self):
        """Its wall time less the other frameworks' jobs that ran between
        its own (a sweep interleaves frameworks)."""
        return self.wall_s - self.spent.get(OTHERS, 0.0)

    @property
    def fraction(self):
        return self.measured_s / self.own_s if self.own_s > 0 else None


def epoch_of(stamp):
    """Seconds since the epoch of a 2016-08-15T12:00:00Z stamp; None for
    none or one that does not parse."""
    try:
        return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ") \
            .replace(tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def job_window(entry, block=None):
    """(start, end) of a job in epoch seconds, or None when run.json never
    saw it run. Its stamps are cut to the second, its wall_s is not: the
    start lies within a second of each stamp (minus wall_s for the end)
    and before the harness's first moment; the middle of what remains."""
    start, end = epoch_of(entry.get("started_at")), epoch_of(
        entry.get("finished_at"))
    wall = entry.get("wall_s")
    if start is None or end is None:
        return None
    if wall is None:
        return start, max(end, start)
    low, high = max(start, end - wall), min(start + 1, end + 1 - wall)
    moments = [at for at in (block or {}).values() if at is not None]
    if moments:
        high = min(high, min(moments))
        low = max(low, max(moments) - wall)
    # Clocks that disagree (another node's) leave no room: trust the host's.
    begin = (low + high) / 2 if low <= high else max(start, end - wall)
    return begin, begin + wall


def window_of(entry, result):
    """(start, end) of a job in epoch seconds, or None: a Slurm task's own
    window where its node side recorded one (`slurm.started_epoch_s` and
    `wall_s`); for an older Slurm result, the wall time placed around its
    phases (run.json's stamps are the watcher's polls, a short cell of a
    group never seen running); else `job_window`."""
    result = result or {}
    block = result.get("phases")
    slurm = nodeenv.block_of(result)
    slurm = slurm if isinstance(slurm, dict) else {}
    wall = _seconds_or_none(slurm.get("wall_s"))
    start = _seconds_or_none(slurm.get("started_epoch_s"))
    if wall is not None and start is not None:
        return start, start + wall
    moments = [at for at in (block or {}).values() if at is not None]
    if wall is not None and moments:
        low, high = max(moments) - wall, min(moments)
        begin = (low + high) / 2 if low <= high else low
        return begin, begin + wall
    return job_window(entry, block)


def _seconds_or_none(value):
    """A node side's own count of seconds, or None where it is no number
    or below 0 (no wall time, no moment since the epoch, is)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not value >= 0:
        return None
    return value


def on_host_clock(entry, window):
    """(window, offset): a job's window moved onto this host's clock when
    it lies outside what run.json's stamps allow (a Slurm node side's
    clock that disagrees with the host's: its end after the host saw the
    job end, or before the host saw it start), and by how much; else
    (window, 0.0). Its phases stay on its own clock: they split its own
    window only."""
    start, end = window
    seen_start, seen_end = epoch_of(entry.get("started_at")), epoch_of(
        entry.get("finished_at"))
    offset = 0.0
    if seen_end is not None and end > seen_end + STAMP_S:
        offset = seen_end - end
    elif seen_start is not None and end < seen_start - STAMP_S:
        offset = seen_start - end
    return (start + offset, end + offset), offset


def _moments(block):
    """[(name, at)] of the phases reached, in time order; the phase a run
    ended in (the first it did not reach) names the stretch up to the
    write, since that is where its time went."""
    order = [n for n in harness_phases.ORDER if n in block]
    reached = sorted(((block[n], order.index(n), n) for n in order
                      if block[n] is not None))
    moments = [(n, at) for at, _i, n in reached]
    last = [n for n, _at in moments if n != "result_written"]
    if moments and moments[-1][0] == "result_written" and last:
        pending = order[order.index(last[-1]) + 1:]
        if pending and pending[0] != "result_written":
            moments[-1] = (pending[0], moments[-1][1])
    return moments


def job_spent(entry, result):
    """{stretch name: seconds} of one job, summing to its wall time; None
    for a job without phase times or without a window."""
    block = (result or {}).get("phases")
    window = window_of(entry, result) if block else None
    if not window:
        return None
    start, end = window
    spent, previous = {}, start
    for name, at in _server(result) + _moments(block) + [("end", end)]:
        at = min(max(at, previous), end)
        spent[NAMES[name]] = spent.get(NAMES[name], 0.0) + at - previous
        previous = at
    _split_training(spent, result)
    return spent


def _server(result):
    """The moments of a forked cell's server (isolation.parent): its
    start and the end of its imports, paid once, in the window of the job
    whose cell started it; a later job's window begins after both, so
    they count nothing there."""
    isolation = result.get("isolation") or {}
    parent = isolation.get("parent") or {}
    if isolation.get("mode") != "fork":
        return []
    return [(name, parent.get(key)) for name, key in (
        ("server_start", "process_start"), ("server_ready", "preloaded_at"))
        if parent.get(key) is not None]


def _split_training(spent, result):
    """A convergence run's training holds its iterations (the timing
    block's seconds: the first as warm-up) and what the framework did
    around them (import, model build, evaluation)."""
    if "training" not in spent:
        return
    timing = result.get("timing") or {}
    warm = sum(timing.get("warmup_s") or ())
    timed = sum(timing.get("per_iteration_s") or ())
    whole = spent.pop("training")
    warm = min(warm, whole)
    timed = min(timed, whole - warm)
    spent["warm-up"] = spent.get("warm-up", 0.0) + warm
    spent["timed"] = spent.get("timed", 0.0) + timed
    spent["training, not iterations"] = whole - warm - timed


def sweeps(job_results, resumed=()):
    """[Sweep] per framework, in order of first appearance, from the job
    results (store.JobResult) of a run; `resumed`: its run.json's
    resumed_at stamps, since the pause before a --resume is no part of the sweep."""
    jobs, out = [], {}
    for entry, result in job_results:
        window = window_of(entry, result)
        if window:
            framework = (entry.get("spec") or {}).get("framework", "?")
            sweep = out.setdefault(framework, Sweep(framework))
            window, offset = on_host_clock(entry, window)
            if offset:
                sweep.moved.append(offset)
            jobs.append((framework, window, job_spent(entry, result),
                         entry.get("status") == "ok"))
    restarts = sorted(filter(None, map(epoch_of, resumed)))
    for sweep in out.values():
        _fill(sweep, jobs, restarts)
    return list(out.values())


def spans(windows, restarts):
    """[(begin, end)] of each session of a run (one, plus one per
    --resume) that ran any of `windows`: its first start, its last end."""
    sessions = {}
    for start, end in windows:
        key = sum(1 for at in restarts if at <= start)
        begin, finish = sessions.get(key, (start, end))
        sessions[key] = (min(begin, start), max(finish, end))
    return [sessions[key] for key in sorted(sessions)]


def _fill(sweep, jobs, restarts):
    mine = [job[1:] for job in jobs if job[0] == sweep.framework]
    sessions = spans([w for w, *_rest in mine], restarts)
    sweep.wall_s = sum(end - begin for begin, end in sessions)
    sweep.jobs = len(mine)
    covered = 0.0
    for (start, end), spent, ok in mine:
        covered += end - start
        if spent is None:
            sweep.unphased += 1
            _add(sweep.spent, UNPHASED, end - start)
            continue
        for name, seconds in spent.items():
            _add(sweep.spent, name, seconds)
        if ok:
            iterations = sum(spent.get(n, 0.0) for n in MEASURED)
            sweep.fixed_s.append(end - start - iterations)
    others = sum(max(0.0, min(end, finish) - max(start, begin))
                 for begin, finish in sessions
                 for f, (start, end), *_rest in jobs if f != sweep.framework)
    others = max(0.0, min(others, sweep.wall_s - covered))
    if others:
        _add(sweep.spent, OTHERS, others)
    # Jobs at once (parallel tasks), or placed by stamps cut to the
    # second, cover more than the sweep's window: the shares are then of
    # the jobs' own time, so that they add up to it, and the overlap is
    # named rather than summed into gaps or shares over 100%.
    sweep.overlap_s = max(0.0, covered - sweep.wall_s)
    sweep.wall_s = max(sweep.wall_s, covered)
    _add(sweep.spent, GAPS, max(0.0, sweep.wall_s - covered - others))


def _add(spent, name, seconds):
    spent[name] = spent.get(name, 0.0) + seconds


def _seconds(value):
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def _packed(items, first, width=78):
    """`items` joined by commas into lines of at most `width`, never
    splitting an item, continued under the first one."""
    if not items:
        return [first + "-"]
    lines, line = [], first + items[0]
    for item in items[1:]:
        if len(line) + len(item) + 3 > width:  # ", " now, "," after
            lines.append(line + ",")
            line = " " * len(first) + item
        else:
            line = f"{line}, {item}"
    return lines + [line]


def _jobs(count):
    return f"{count} job" if count == 1 else f"{count} jobs"


def _share(seconds, wall):
    return f"{seconds / wall:.0%}" if wall > 0 else "-"


def summary_lines(job_results, record=None):
    """Lines saying where each framework's part of the sweep went (the
    run's `record` says when it was resumed); a note alone when no result
    has phase times (written before they were)."""
    resumed = (record or {}).get("resumed_at") or ()
    found = [s for s in sweeps(job_results, resumed) if s.jobs > s.unphased]
    if not found:
        return ["", "where the time went: no result here has phase times "
                "(written before the harness recorded them): not shown"]
    lines = ["", "where the time went (first job start to last job end):"]
    for sweep in found:
        lines.extend(_framework_lines(sweep))
    return lines


def _framework_lines(sweep):
    # Shares of its own time: other frameworks' jobs between its own are
    # said apart, not counted against it.
    wall = sweep.own_s
    others = sweep.spent.get(OTHERS, 0.0)
    besides = (f"; other frameworks' jobs between: {_seconds(others)}"
               if others >= 0.5 else "")
    head = (f"  {sweep.framework}: {_share(sweep.measured_s, wall)} "
            f"measured of {_seconds(wall)}, {_jobs(sweep.jobs)} (warm-up "
            f"{_share(sweep.spent.get('warm-up', 0.0), wall)}, timed "
            f"{_share(sweep.spent.get('timed', 0.0), wall)}){besides}")
    # Largest first; what rounds to 0% would only lengthen the line.
    rest = sorted(((s, n) for n, s in sweep.spent.items()
                   if n not in MEASURED + (OTHERS,) and wall > 0 and
                   s / wall >= 0.005),
                  reverse=True)
    lines = [head] + _packed([f"{n} {_share(s, wall)}" for s, n in rest],
                             "    rest: ")
    if sweep.fixed_s:
        lines.append(f"    fixed cost per ok job: "
                     f"{statistics.median(sweep.fixed_s):.1f} s median "
                     f"(its wall time less its iterations)")
    if sweep.unphased:
        lines.append(f"    {_jobs(sweep.unphased)} without phase times (from "
                     f"an older harness, or written by the host): not split")
    if sweep.moved:
        lines.append(f"    {_jobs(len(sweep.moved))} on a clock up to "
                     f"{_seconds(max(map(abs, sweep.moved)))} off this "
                     f"host's: placed by the host's stamps")
    if sweep.overlap_s > STAMP_S * max(1, sweep.jobs - 1):
        lines.append(f"    its jobs overlap by {_seconds(sweep.overlap_s)} "
                     f"(run at once, or clocks that disagree):")
        lines.append("      shares are of the jobs' own time, not summed")
    return lines
