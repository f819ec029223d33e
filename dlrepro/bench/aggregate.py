"""One cell measured in several processes (`--repeat N`): its processes'
results combined into one estimate.

The noise that misleads comparisons lives between processes (memory
layout, thread placement, frequency, the state of the machine), not only
between the iterations of one process. With two or more processes the
confidence interval of a cell's mean therefore treats each process's mean
as one observation (a two-level estimate: Student's t over the process
means), so it widens when processes disagree even if each one is steady.
With one process it falls back to the iterations of that process, and says
so. Pure functions over result dicts; no I/O.
"""
import math
from typing import NamedTuple, Optional

from harness.stats import CV_WARNING, high_variation, t_quantile_975

BETWEEN = "between-process"
WITHIN = "within-process"


class CellStats(NamedTuple):
    cell: dict
    processes: int
    samples: list            # every timed iteration of every process, s
    process_means: list      # one mean per process, s
    mean_s: float            # mean of the process means
    ci95_s: tuple            # 95% CI of mean_s
    ci_basis: str            # BETWEEN or WITHIN
    between_sd_s: Optional[float]   # spread of the process means
    within_sd_s: float       # pooled spread of iterations inside a process
    samples_per_s: float     # total samples over total timed seconds


def cell_key(cell):
    """What makes two results the same cell: every identity field."""
    return tuple(sorted((k, json_key(v)) for k, v in cell.items()))


def json_key(value):
    return value if not isinstance(value, (list, dict)) else repr(value)


def cells(job_results):
    """[(spec, [(entry, result), ...])]: a run's jobs grouped by the cell
    they measured (one job per process), in the order cells first appear."""
    groups = {}
    for entry, result in job_results:
        key = cell_key(entry["spec"])
        groups.setdefault(key, (entry["spec"], []))[1].append((entry, result))
    return list(groups.values())


def ok_results(members):
    """The results of a cell's jobs that ended ok, as their files say."""
    return [r for e, r in members if r is not None and e["status"] == "ok"
            and r["status"] == "ok"]


def group(job_results):
    """[(cell, [result, ...])] of the ok results of a run's (entry,
    result) job results, one group per cell with any, in order."""
    found = (ok_results(members) for _spec, members in cells(job_results))
    return [(ok[0]["cell"], ok) for ok in found if ok]


def mean(values):
    return math.fsum(values) / len(values)


def sd(values):
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values)
                     / (len(values) - 1))


def cell_stats(cell, results):
    """The combined estimate of one cell's ok results (one per process)."""
    series = [r["timing"]["per_iteration_s"] for r in results]
    means = [mean(s) for s in series]
    samples = [t for s in series for t in s]
    overall = mean(means)
    within = math.sqrt(mean([sd(s) ** 2 for s in series]))
    if len(means) >= 2:
        between = sd(means)
        half = t_quantile_975(len(means) - 1) * between / math.sqrt(len(means))
        basis = BETWEEN
    else:
        between = None
        half = (t_quantile_975(len(samples) - 1) * within
                / math.sqrt(len(samples)) if len(samples) > 1 else 0.0)
        basis = WITHIN
    total_s = math.fsum(samples)
    return CellStats(cell=cell, processes=len(results), samples=samples,
                     process_means=means, mean_s=overall,
                     # Student's t as it is, even below 0 (with two or
                     # three disagreeing processes): clipping it would hide
                     # how little the processes pin the mean down.
                     ci95_s=(overall - half, overall + half),
                     ci_basis=basis,
                     between_sd_s=between, within_sd_s=within,
                     samples_per_s=(cell["global_batch_size"] * len(samples)
                                    / total_s if total_s else None))


def warnings(stats):
    """What the cell's combined figures warn of: an interval reaching below
    0, a high pooled within-process CV."""
    found = []
    if stats.ci95_s[0] < 0:
        why = ("the processes disagree; raise --repeat"
               if stats.ci_basis == BETWEEN else
               "its iterations spread too far; raise --iterations")
        found.append(f"95% CI reaches below 0 ({stats.ci95_s[0] * 1e3:.2f} "
                     f"ms): {why}")
    if stats.mean_s and stats.within_sd_s / stats.mean_s > CV_WARNING:
        found.append(high_variation(stats.within_sd_s / stats.mean_s,
                                    "within-process CV"))
    return found


def run_stats(job_results):
    """CellStats of every cell with at least one ok result, in order."""
    return [cell_stats(cell, results) for cell, results in group(job_results)]
