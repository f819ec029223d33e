"""Summary statistics of per-iteration times. Pure functions, no I/O."""
import math

_Z975 = 1.959963984540054
# Up to here the quantile is solved from the exact distribution function;
# above it the expansion (error of order df**-5) is off by less than 2e-13,
# checked against mpmath (SciPy itself uses the expansion from about 98 on).
EXACT_DF_LIMIT = 300
# Each solve sums df/2 terms per Newton step: once per (df, level) is enough.
_SOLVED = {}

# Iglewicz and Hoaglin: |modified z| above 3.5 marks an outlier.
OUTLIER_Z = 3.5
CV_WARNING = 0.05
HIGH_VARIATION = "high variation:"
WARMUP_DRIFT_WARNING = 0.10


def t_quantile_975(df):
    """Student's t 0.975 quantile for integer df >= 1 (the bound of a
    two-sided 95% interval): t_quantile(df, 0.95)."""
    return t_quantile(df, 0.95)


def t_quantile(df, central):
    """The t with P(|T| < t) = central, for integer df >= 1 and
    0 < central < 1: solved from the exact distribution function up to
    EXACT_DF_LIMIT degrees of freedom (relative error below 1e-12), the
    Cornish-Fisher expansion to df**-4 above (below 2e-13 at 0.95, 1e-10
    up to 0.9999, checked against SciPy)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if not 0 < central < 1:
        raise ValueError("a central probability is between 0 and 1")
    z = _normal_quantile(central)
    if df > EXACT_DF_LIMIT:
        return _cornish_fisher(z, df)
    key = (df, central)
    if key not in _SOLVED:
        _SOLVED[key] = _solve(df, central, z)
    return _SOLVED[key]


def _normal_quantile(central):
    """The z with P(|Z| < z) = central."""
    if central == 0.95:
        return _Z975
    # erf is increasing and concave above 0: Newton's method from 0 rises
    # to the root without overshooting it, as in _solve.
    z = 0.0
    for _ in range(100):
        step = ((central - math.erf(z / math.sqrt(2)))
                / (2 * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)))
        z += step
        if abs(step) <= 1e-15 * z:
            break
    return z


def _solve(df, central, z):
    # P(|T| < t) is increasing and concave in t > 0, so Newton's method
    # from the normal quantile (below every t quantile) rises to the root
    # without overshooting it.
    t = z
    for _ in range(100):
        step = (central - _central_probability(t, df)) / (2 * _density(t, df))
        t += step
        if abs(step) <= 1e-15 * t:
            break
    return t


def _central_probability(t, df):
    """P(|T| < t) for integer df: the finite sums of Abramowitz and Stegun
    26.7.3 (theta = atan(t / sqrt(df)))."""
    cos2 = df / (df + t * t)
    sin = t / math.sqrt(df + t * t)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, df // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        return sin * total
    theta = math.atan(t / math.sqrt(df))
    if df == 1:
        return 2 * theta / math.pi
    term = total = 1.0
    for k in range(1, (df - 1) // 2):
        term *= cos2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + sin * math.sqrt(cos2) * total)


def _density(t, df):
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)
                    - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(t * t / df))


def _cornish_fisher(z, df):
    """Abramowitz and Stegun 26.7.5, from the normal quantile z."""
    return (z + (z ** 3 + z) / (4 * df)
            + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z)
            / (384 * df ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3
               - 945 * z) / (92160 * df ** 4))


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


def high_variation(cv, what="CV"):
    """The warning for a coefficient of variation above CV_WARNING."""
    return ("{} {} {:.1%} exceeds {:.0%}; rerun on a quieter machine or "
            "with more iterations".format(HIGH_VARIATION, what, cv,
                                          CV_WARNING))


def warnings_for(times, warmup):
    """Human-readable warnings about the quality of a timed series."""
    found = []
    summary = summarize(times, 1)
    if summary["cv"] is not None and summary["cv"] > CV_WARNING:
        found.append(high_variation(summary["cv"]))
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
