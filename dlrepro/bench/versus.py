"""Run against run: per matching cell, the ratio of means with its 95%
confidence interval and a significance test.

The test is Mann-Whitney U on the raw per-iteration times, as asv does:
iteration times are skewed, with a long right tail (allocator, page
faults, interrupts), and a rank test assumes no distribution. Iterations
of one process are not independent, though: two processes of the same
code can differ by more than their iterations' spread. So a difference is
called only when (1) U's two-sided p < 0.05, (2) the ratio's confidence
interval excludes 1, where that interval spans the process means whenever
both runs measured a cell in two or more processes (`--repeat`), and (3)
the change is at least `min_change` (default 5%, like asv's factor):
anything else is marked not significant.

Cells match on framework, network, device, batch sizes, GPUs and dataset;
matching cells that differ in what makes a comparison meaningless (thread
count, clock policy, framework version, iterations' device) are named
with the reason, not compared.
"""
import math
from typing import NamedTuple

from harness import hostcpu
from harness.stats import t_quantile

from dlrepro.bench import aggregate
from dlrepro.errors import UserError
from dlrepro.run import runrecord, store
from dlrepro.run.kinds import KINDS

ALPHA = 0.05
MIN_CHANGE = 0.05
MATCH = ("framework", "network", "device", "batch_size", "global_batch_size",
         "gpus", "dataset", "precision", "compile")
# What a result written before a field existed had: the framework's default.
UNSET = {"precision": "default", "compile": None}
MUST_AGREE = (("threads", "thread count"), ("clock_policy", "clock policy"),
              ("profile", "profile"))


def load_bench_run(out, run, what="run"):
    """(record, job_results) of bench run `run` (a --run value under `out`); a
    run of another kind is refused in one line, since its cells are not
    bench cells even where their fields match (a convergence run's timing
    covers training epochs)."""
    run_dir = store.resolve_run(out, run)
    record, job_results = store.load_run(run_dir)
    if runrecord.kind_of(record) is not KINDS["bench"]:
        raise UserError(f"{what} {run_dir.name} is a "
                        f"{runrecord.kind_of(record).label} run: invoke compare "
                        f"compares bench runs only; runs of different kinds "
                        f"are not compared")
    return record, job_results


class Row(NamedTuple):
    cell: dict
    base_s: float
    new_s: float
    ratio: float              # new / base: above 1 is slower
    ratio_ci: tuple
    p_value: float
    verdict: str              # "slower", "faster" or "not significant"
    basis: str                # what the interval spans


class Unmatched(NamedTuple):
    cell: dict
    reason: str


def _key(cell):
    return tuple(cell.get(k, UNSET.get(k)) for k in MATCH)


def _version(result):
    return (result.get("environment") or {}).get("framework_version")


def mann_whitney_p(a, b):
    """Two-sided p-value of Mann-Whitney U (exact without ties for small
    samples, else the normal approximation with tie correction)."""
    n, m = len(a), len(b)
    ranked = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks, ties, i = [0.0] * len(ranked), [], 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    u = sum(r for r, (_, side) in zip(ranks, ranked) if side == 0) \
        - n * (n + 1) / 2
    if all(t == 1 for t in ties) and n * m <= 400:
        return _exact_p(u, n, m)
    mean = n * m / 2
    total = n + m
    var = n * m / 12 * ((total + 1) - sum(t ** 3 - t for t in ties)
                        / (total * (total - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def _exact_p(u, n, m):
    # counts[k] = arrangements of n and m values with U == k
    counts = [[[0] * (n * m + 1) for _ in range(m + 1)] for _ in range(n + 1)]
    for j in range(m + 1):
        counts[0][j][0] = 1
    for i in range(1, n + 1):
        counts[i][0][0] = 1
        for j in range(1, m + 1):
            for k in range(n * m + 1):
                counts[i][j][k] = counts[i][j - 1][k] + (
                    counts[i - 1][j][k - j] if k >= j else 0)
    dist = counts[n][m]
    total = math.comb(n + m, n)
    low = min(u, n * m - u)
    tail = sum(dist[k] for k in range(int(math.floor(low)) + 1)) / total
    return min(1.0, 2 * tail)


def _log_se(stats):
    """(standard error of log(mean), degrees of freedom) over the units the
    cell's interval spans."""
    units = stats.process_means if stats.processes >= 2 else stats.samples
    if len(units) < 2:
        return 0.0, 1
    sd = aggregate.sd(units)
    return sd / math.sqrt(len(units)) / stats.mean_s, len(units) - 1


def ratio_ci(base, new, central=0.95):
    """new/base of the mean times and its `central` interval (Welch on the
    logs, the smaller degrees of freedom)."""
    se_a, df_a = _log_se(base)
    se_b, df_b = _log_se(new)
    ratio = new.mean_s / base.mean_s
    half = (t_quantile(min(df_a, df_b), central)
            * math.sqrt(se_a ** 2 + se_b ** 2))
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half))


def compare_cell(base, new, alpha=ALPHA, min_change=MIN_CHANGE):
    ratio, ci = ratio_ci(base, new)
    p = mann_whitney_p(base.samples, new.samples)
    called = p < alpha and not ci[0] <= 1.0 <= ci[1] and \
        abs(ratio - 1) >= min_change
    verdict = ("slower" if ratio > 1 else "faster") if called else \
        "not significant"
    basis = (aggregate.BETWEEN if base.processes >= 2 and new.processes >= 2
             else aggregate.WITHIN)
    return Row(new.cell, base.mean_s, new.mean_s, ratio, ci, p, verdict,
               basis)


def _measured(job_results):
    """[(CellStats, the cell's first ok result)] of a run."""
    return [(aggregate.cell_stats(cell, results), results[0])
            for cell, results in aggregate.group(job_results)]


def compare_runs(base_pairs, new_pairs, alpha=ALPHA, min_change=MIN_CHANGE):
    """([Row], [Unmatched]) for two runs' job results (store.JobResult)."""
    base = {_key(stats.cell): (stats, first)
            for stats, first in _measured(base_pairs)}
    rows, unmatched = [], []
    for stats, first in _measured(new_pairs):
        other = base.pop(_key(stats.cell), None)
        if other is None:
            unmatched.append(Unmatched(stats.cell, "only in the new run"))
            continue
        reason = _mismatch(other, (stats, first))
        if reason:
            unmatched.append(Unmatched(stats.cell, reason))
            continue
        rows.append(compare_cell(other[0], stats, alpha, min_change))
    unmatched += [Unmatched(stats.cell, "only in the base run")
                  for stats, _first in base.values()]
    return rows, unmatched


def _mismatch(base, new):
    """Why two matching cells, each (stats, first result), must not be
    compared; None when they may."""
    (base, base_first), (new, new_first) = base, new
    for field, label in MUST_AGREE:
        if base.cell.get(field) != new.cell.get(field):
            return (f"different {label}: {base.cell.get(field)} against "
                    f"{new.cell.get(field)}")
    a, b = _version(base_first), _version(new_first)
    if a != b:
        return f"different framework versions: {a} against {b}"
    return None


def slowdowns(rows, threshold):
    """Rows significantly slower by more than `threshold` (0.10 = 10%)."""
    return [r for r in rows if r.verdict == "slower" and
            r.ratio > 1 + threshold]


def _interval(ci):
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def format_rows(rows, unmatched):
    lines = [f"{'framework':<10} {'network':<10} {'device':<6} {'batch':>5} "
             f"{'thr':>3} {'base ms':>9} {'new ms':>9} {'new/base':>8} "
             f"{'95% CI':>15} {'p':>7}  verdict"]
    for r in rows:
        c = r.cell
        lines.append(
            f"{c['framework']:<10} {c['network']:<10} {c['device']:<6} "
            f"{c['global_batch_size']:>5} "
            f"{'-' if c['threads'] is None else c['threads']:>3} "
            f"{r.base_s * 1e3:>9.2f} {r.new_s * 1e3:>9.2f} {r.ratio:>8.3f} "
            f"{_interval(r.ratio_ci):>15} {r.p_value:>7.3g}  {r.verdict}")
    for u in unmatched:
        c = u.cell
        lines.append(f"not compared: {c['framework']} {c['network']} "
                     f"{c['device']} batch {c['global_batch_size']}: "
                     f"{u.reason}")
    lines.append(f"Mann-Whitney U on per-iteration times; a difference is "
                 f"called when p < {ALPHA}, the ratio's 95% CI excludes 1 "
                 f"and the change is at least the minimum change.")
    return lines


def _allocator_state(result):
    allocator = (result.get("environment") or {}).get("allocator", "absent")
    if allocator == "absent":
        return "adapting to each process's history"
    if allocator is None:
        return "not glibc, left as it was"
    if allocator.get("mmap_threshold_bytes") is None:
        return f"{allocator['library']}, thresholds not set"
    trim = allocator["trim_threshold_bytes"]
    # SIZE_MAX (harness.allocator.TRIM_OFF_BYTES): glibc never trims by itself.
    trim = "off" if trim >= 2 ** 32 - 1 else f"{trim // 2 ** 20} MiB"
    # mmap_max 0 (harness.allocator.MMAP_MAX): every block from the heap;
    # absent before the harness set it, null where mallopt refused it.
    mapping = {0: ", mmap off"}.get(allocator.get("mmap_max"), "")
    return (f"{allocator['library']} fixed at mmap "
            f"{allocator['mmap_threshold_bytes'] // 2 ** 20} MiB, trim {trim}"
            f"{mapping}")


def _states_line(base_pairs, new_pairs, state_of, what, why):
    """One line when the two runs' cells ran with `what` in different
    states (state_of(result)), else None."""
    # Only cells that ran: an unsupported or failed cell's result has no
    # environment to tell, and no iteration time the state could explain.
    def states(job_results):
        return sorted({state_of(result) for _, result in job_results
                       if result is not None and result.get("status") == "ok"})
    base, new = states(base_pairs), states(new_pairs)
    if base == new:
        return None
    return (f"note: the runs' {what} differed (base: "
            f"{'; '.join(base) or 'no results'}; this run: "
            f"{'; '.join(new) or 'no results'}); {why}")


def allocator_line(base_pairs, new_pairs):
    """One line when the two runs' cells ran with the C allocator in
    different states (harness.allocator: results from before the harness
    fixed glibc's thresholds have none), else None: small CPU cells'
    iteration times depend on it."""
    return _states_line(base_pairs, new_pairs, _allocator_state,
                        "C allocator", "on the CPU a difference may be its "
                        "page faults, not the framework's")


def _collector_state(result):
    block = (result.get("environment") or {}).get("python_gc", "absent")
    if block == "absent":
        return "not settled before the warm-up"
    if block["frozen_objects"] is None:
        return "collected before the warm-up, nothing frozen"
    return "collected and frozen before the warm-up"


def collector_line(base_pairs, new_pairs):
    """One line when one run's cells settled Python's garbage collector
    before their warm-up and the other's did not (harness.collector:
    results from before have no environment.python_gc), else None."""
    return _states_line(base_pairs, new_pairs, _collector_state,
                        "Python garbage collector", "a full collection "
                        "among a short cell's steps costs 11-76 ms on the "
                        "CPU, not the framework's")


def _busy_cells(job_results):
    """The ok cells whose timed iterations ran on a busy host or under
    steal (harness.hostcpu's warnings), as `framework network bBATCH`."""
    return sorted({f"{r['cell']['framework']} {r['cell']['network']} "
                   f"b{r['cell']['global_batch_size']}"
                   for _, r in job_results
                   if r is not None and r.get("status") == "ok"
                   and any(hostcpu.is_host_warning(w)
                           for w in r.get("warnings") or ())})


def host_line(base_pairs, new_pairs):
    """One line naming the cells of either run that were timed while the
    machine had no CPU to spare or lost time to steal, else None."""
    base, new = _busy_cells(base_pairs), _busy_cells(new_pairs)
    if not base and not new:
        return None
    return (f"note: cells timed on a busy host or under steal (base: "
            f"{', '.join(base) or 'none'}; this run: "
            f"{', '.join(new) or 'none'}); a difference in these may be the "
            f"machine's load, not the framework's")


def note_lines(base_pairs, new_pairs):
    """What `invoke compare --against` says before its table about what
    differed beside the cells themselves."""
    return [line for line in (allocator_line(base_pairs, new_pairs),
                              collector_line(base_pairs, new_pairs),
                              host_line(base_pairs, new_pairs)) if line]
