"""Steps in a history of measurements: where a cell's time changed level.

The method is asv's (airspeed velocity, asv/step_detect.py): fit the
history with a piecewise-constant function by minimising, over every
partition into segments, the sum of absolute deviations from each
segment's median plus a penalty per segment (the "Potts" problem), solved
exactly by dynamic programming over segment ends (optimal partitioning).
An absolute-deviation fit is not pulled by one outlying run; a penalty per
segment, not a threshold on the last two points, decides whether a change
is a level change. Ours differs from asv's in how it chooses the penalty:
from a robust estimate of the history's own noise (the median absolute
difference of consecutive values), scaled by log(n) like an information
criterion, rather than asv's search over penalties. Each boundary found is
then kept only if the ratio of the levels on its two sides has a 95%
confidence interval (Welch's t on the logarithms of the process means)
that excludes 1 and is at least `min_change` away from 1.

Values are fitted on the log scale so that a step is a ratio whatever the
cell's time. Pure functions; no I/O.
"""
import bisect
import math
from typing import NamedTuple, Optional

from harness.stats import t_quantile_975

# Penalty per segment, in units of noise x log(n): chosen with
# benchmarks/history_steps.py (flat noisy histories: false positives;
# 5% steps: detections).
PENALTY = 2.0
MIN_SIZE = 2          # a level is at least two runs: one run is not a step
MIN_CHANGE = 0.02     # steps under 2% are not reported


class Step(NamedTuple):
    index: int               # the first run at the new level
    before_s: float          # level before (mean of the runs' means)
    after_s: float           # level after
    ratio: float             # after / before
    ci95: Optional[tuple]    # 95% CI of the ratio; None with too few values


def _median(ordered):
    n = len(ordered)
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1]
                                          + ordered[middle]) / 2


def segment_costs(values):
    """cost[l][r]: sum of |v - median| over values[l:r] (r > l)."""
    n = len(values)
    cost = [[0.0] * (n + 1) for _ in range(n + 1)]
    for left in range(n):
        ordered = []
        for right in range(left, n):
            bisect.insort(ordered, values[right])
            centre = _median(ordered)
            cost[left][right + 1] = math.fsum(abs(v - centre)
                                              for v in ordered)
    return cost


def partition(values, penalty, min_size=MIN_SIZE):
    """The ends (exclusive) of the segments of the optimal piecewise-
    constant fit: minimal sum of segment costs + penalty per segment."""
    n = len(values)
    if n < 2 * min_size:
        return [n]
    cost = segment_costs(values)
    best = [0.0] + [math.inf] * n
    start = [0] * (n + 1)
    for right in range(min_size, n + 1):
        for left in [0] + list(range(min_size, right - min_size + 1)):
            total = best[left] + cost[left][right] + penalty
            if total < best[right]:
                best[right], start[right] = total, left
    ends, right = [], n
    while right > 0:
        ends.append(right)
        right = start[right]
    return ends[::-1]


def noise(values):
    """A robust standard deviation of the values around their level: the
    median absolute consecutive difference / (0.6745 sqrt 2), which a few
    level changes barely move."""
    diffs = sorted(abs(b - a) for a, b in zip(values, values[1:]))
    if not diffs:
        return 0.0
    return _median(diffs) / (0.6745 * math.sqrt(2))


def _mean(values):
    return math.fsum(values) / len(values)


def _var(values):
    centre = _mean(values)
    return math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1)


def log_ratio_ci(before, after):
    """95% CI of exp(mean(log after) - mean(log before)) by Welch's t over
    the two samples of process means; None when a side has one value."""
    a, b = [math.log(v) for v in before], [math.log(v) for v in after]
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = _var(a) / len(a), _var(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return (math.exp(_mean(b) - _mean(a)),) * 2
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile_975(max(1, int(df))) * se
    centre = _mean(b) - _mean(a)
    return (math.exp(centre - half), math.exp(centre + half))


def detect(means, process_means=None, penalty=PENALTY, min_size=MIN_SIZE,
           min_change=MIN_CHANGE):
    """[Step] of a history of run means (seconds, oldest first).
    `process_means[i]` are run i's processes' means (its between-process
    spread); without them each run counts as one value."""
    groups = process_means or [[m] for m in means]
    logs = [math.log(m) for m in means]
    scale = noise(logs)
    if scale == 0:
        scale = 1e-9
    ends = partition(logs, penalty * scale * math.log(max(len(logs), 2)),
                     min_size)
    steps = []
    bounds = [(start, end) for start, end in zip([0] + ends[:-1], ends)]
    for (a0, a1), (b0, b1) in zip(bounds, bounds[1:]):
        before = [v for g in groups[a0:a1] for v in g]
        after = [v for g in groups[b0:b1] for v in g]
        ratio = _mean(means[b0:b1]) / _mean(means[a0:a1])
        ci = log_ratio_ci(before, after)
        if abs(ratio - 1) < min_change:
            continue
        if ci is not None and ci[0] <= 1 <= ci[1]:
            continue
        steps.append(Step(b0, _mean(means[a0:a1]), _mean(means[b0:b1]),
                          ratio, ci))
    return steps
