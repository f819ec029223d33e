"""Statistics of per-iteration times, checked against hand computations."""
import json
import math

import pytest

from harness import stats
from paths import TESTS

GOLDEN = TESTS / "golden"


def test_summary_of_a_known_series():
    times = [1.0, 2.0, 3.0, 4.0, 5.0]
    s = stats.summarize(times, samples_per_iteration=10)
    assert s["mean_s"] == 3.0
    assert s["median_s"] == 3.0
    assert s["std_s"] == pytest.approx(math.sqrt(2.5))
    assert (s["min_s"], s["max_s"]) == (1.0, 5.0)
    # linear interpolation: position 0.05 * 4 = 0.2 between 1 and 2
    assert s["p05_s"] == pytest.approx(1.2)
    assert s["p95_s"] == pytest.approx(4.8)
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert s["ci95_s"] == pytest.approx([3.0 - half, 3.0 + half])
    assert s["cv"] == pytest.approx(math.sqrt(2.5) / 3.0)
    assert s["total_s"] == 15.0


def test_throughput_is_total_samples_over_total_time():
    # Rates per step would be 100 and 10 samples/s (mean 55); the true
    # throughput is 20 samples in 1.1 s.
    s = stats.summarize([0.1, 1.0], samples_per_iteration=10)
    assert s["samples_per_s"] == pytest.approx(20 / 1.1)


def test_single_iteration_has_no_spread():
    s = stats.summarize([0.5], 4)
    assert s["std_s"] is None and s["ci95_s"] is None and s["cv"] is None
    assert s["samples_per_s"] == 8.0


def test_empty_series_is_an_error():
    with pytest.raises(ValueError):
        stats.summarize([], 1)


@pytest.mark.parametrize("df,expected", [
    (1, 12.706204736), (10, 2.228138852), (30, 2.042272456),
    (31, 2.039513446), (40, 2.021075390), (100, 1.983971519),
    (1000, 1.962339081),
])
def test_t_quantiles(df, expected):
    assert stats.t_quantile_975(df) == pytest.approx(expected, abs=2e-6)


def test_t_quantiles_match_scipy_to_1e9():
    """Against scipy.stats.t.ppf(0.975, df), computed once (the command is
    in the file): the table and three-term expansion it replaces were off
    by 1.75e-6 at 31 degrees of freedom."""
    golden = json.loads((GOLDEN / "t975-scipy.json").read_text())
    worst = max((abs(stats.t_quantile_975(int(df)) - value) / value, df)
                for df, value in golden["t975"].items())
    assert worst[0] < 1e-9, worst


def test_t_quantile_rejects_zero_degrees_of_freedom():
    with pytest.raises(ValueError):
        stats.t_quantile_975(0)


# Critical values of Student's t as printed in NIST/SEMATECH's e-Handbook
# of Statistical Methods, 1.3.6.7.2 (upper tail 0.05, 0.01, 0.005, 0.001:
# central 0.90, 0.98, 0.99, 0.998), to their three decimals.
@pytest.mark.parametrize("central,df,expected", [
    (0.90, 3, 2.353), (0.98, 7, 2.998), (0.99, 1, 63.657),
    (0.99, 5, 4.032), (0.99, 10, 3.169), (0.99, 30, 2.750),
    (0.998, 30, 3.385), (0.998, 100, 3.174),
])
def test_t_quantiles_at_other_levels(central, df, expected):
    assert stats.t_quantile(df, central) == pytest.approx(expected, abs=6e-4)


def test_the_95_quantile_is_the_general_one_at_095():
    assert stats.t_quantile_975(12) == stats.t_quantile(12, 0.95)
    assert stats.t_quantile(12, 0.99) > stats.t_quantile(12, 0.95)


@pytest.mark.parametrize("central", [0.0, 1.0, 1.5])
def test_t_quantile_rejects_a_central_probability_outside_0_1(central):
    with pytest.raises(ValueError):
        stats.t_quantile(10, central)


def test_outliers_by_modified_z_score():
    times = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 3.0]
    # median 1.0, MAD 0.01: 3.0 has z = 0.6745 * 2.0 / 0.01 = 134.9
    assert stats.outlier_count(times) == 1
    assert stats.outlier_count([1.0, 1.0, 1.0, 5.0]) == 0  # MAD 0


def test_warnings_for_noisy_series():
    warnings = stats.warnings_for([1.0, 2.0, 1.0, 2.0], warmup=3)
    assert any("CV" in w for w in warnings)
    assert stats.warnings_for([1.0, 1.01, 0.99, 1.0], warmup=3) == []


def test_warning_when_warmup_was_too_short():
    times = [2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    warnings = stats.warnings_for(times, warmup=1)
    assert any("warm-up too short" in w for w in warnings)
    assert any("no warm-up" in w for w in stats.warnings_for([1.0] * 4, 0))
