"""Tables from results: summary rows and the side-by-side comparison."""
from dlrepro.bench import report


def pair(framework, network, status="ok", mean=0.25, threads=2):
    cell = {"framework": framework, "network": network, "device": "cpu",
            "global_batch_size": 16, "threads": threads}
    result = {"cell": cell, "status": status, "warnings": [],
              "timing": {"mean_s": mean, "ci95_s": [mean * 0.9, mean * 1.1],
                         "samples_per_s": 16 / mean, "cv": 0.02}}
    return {"spec": cell, "status": status, "message": None}, result


def test_summary_row_formats_time_ci_and_throughput():
    (row,) = report.summary_rows([pair("pytorch", "fcn5")])
    assert row == ("pytorch", "fcn5", "cpu", "16", "2", "ok", "250.00 ms",
                   "±10.0%", "64.0", "2.0%", "")


def test_side_by_side_has_a_column_per_framework():
    lines = report.side_by_side([
        pair("pytorch", "fcn5", mean=0.5), pair("mxnet", "fcn5", mean=2.0),
        pair("pytorch", "lstm", mean=0.001),
        pair("mxnet", "lstm", status="oom")])
    assert lines[0].split() == ["network", "device", "batch", "threads",
                                "pytorch", "s/iter", "mxnet", "s/iter"]
    assert lines[2].split() == ["fcn5", "cpu", "16", "2", "500.00", "ms",
                                "2.000"]
    assert lines[3].split() == ["lstm", "cpu", "16", "2", "1.00", "ms", "oom"]


def test_side_by_side_needs_two_frameworks():
    assert report.side_by_side([pair("pytorch", "fcn5")]) is None


def test_status_counts():
    assert report.status_counts([pair("a", "x"), pair("b", "x", "oom"),
                                 pair("c", "x")]) == {"ok": 2, "oom": 1}
