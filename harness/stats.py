"""Summary statistics of per-iteration times. Pure functions, no I/O."""
import math

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836,
         2.446911851, 2.364624252, 2.306004135, 2.262157163, 2.228138852,
         2.200985160, 2.178812830, 2.160368656, 2.144786688, 2.131449546,
         2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447,
         2.079613845, 2.073873068, 2.068657610, 2.063898562, 2.059538553,
         2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456)
_Z975 = 1.959963984540054

# Iglewicz and Hoaglin: |modified z| above 3.5 marks an outlier.
OUTLIER_Z = 3.5
CV_WARNING = 0.05
WARMUP_DRIFT_WARNING = 0.10


def t_quantile_975(df):
    """Student's t 0.975 quantile: a table to 30 degrees of freedom, then
    the Cornish-Fisher expansion (error below 1e-6 from there on)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (z + (z ** 3 + z) / (4 * df)
            + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def median(values):
    return percentile(sorted(values), 0.5)


def outlier_count(values):
    """Values whose modified z-score exceeds OUTLIER_Z (0 when MAD is 0)."""
    med = median(values)
    mad = median([abs(v - med) for v in values])
    if mad == 0:
        return 0
    return sum(1 for v in values if abs(0.6745 * (v - med) / mad) > OUTLIER_Z)


def summarize(times, samples_per_iteration):
    """Statistics of per-iteration seconds.

    `mean_s` is the paper's processing_time. Throughput is total samples over
    total timed seconds, not a mean of per-iteration rates (which would
    over-weight the fast iterations).
    """
    n = len(times)
    if n == 0:
        raise ValueError("no timed iterations")
    ordered = sorted(times)
    total = math.fsum(times)
    mean = total / n
    if n > 1:
        std = math.sqrt(math.fsum((t - mean) ** 2 for t in times) / (n - 1))
        half = t_quantile_975(n - 1) * std / math.sqrt(n)
        ci = [mean - half, mean + half]
        cv = std / mean if mean > 0 else None
    else:
        std, ci, cv = None, None, None
    return {
        "mean_s": mean,
        "median_s": percentile(ordered, 0.5),
        "std_s": std,
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "p05_s": percentile(ordered, 0.05),
        "p95_s": percentile(ordered, 0.95),
        "ci95_s": ci,
        "cv": cv,
        "outliers": outlier_count(times),
        "total_s": total,
        "samples_per_s": samples_per_iteration * n / total if total > 0 else None,
    }


def warnings_for(times, warmup):
    """Human-readable warnings about the quality of a timed series."""
    found = []
    summary = summarize(times, 1)
    if summary["cv"] is not None and summary["cv"] > CV_WARNING:
        found.append("high variation: CV {:.1%} exceeds {:.0%}; rerun on a "
                     "quieter machine or with more iterations".format(
                         summary["cv"], CV_WARNING))
    if warmup == 0:
        found.append("no warm-up iterations: the first timed iterations "
                     "include one-off costs (allocation, autotuning)")
    quarter = max(1, len(times) // 4)
    if len(times) >= 4:
        head = median(times[:quarter])
        rest = median(times[quarter:])
        if rest > 0 and head > rest * (1 + WARMUP_DRIFT_WARNING):
            found.append("warm-up too short: the first {} timed iterations "
                         "ran {:.0%} slower than the rest; raise --warmup".format(
                             quarter, head / rest - 1))
    return found
