"""Tables from results: one row per cell, one unit per column, the
side-by-side comparison, and cells measured in several processes."""
import csv
import json
import math
import sqlite3

import pytest

from dlrepro.bench import aggregate, report
from dlrepro.run import store
from harness import hostcpu, stats as hstats
from cli import invoke
from paths import SCRIPTED


def pair(framework, network, status="ok", times=(0.24, 0.25, 0.26),
         threads=2, job=None):
    cell = {"framework": framework, "network": network, "device": "cpu",
            "global_batch_size": 16, "threads": threads}
    result = {"cell": cell, "status": status, "warnings": [],
              "timing": {"per_iteration_s": list(times)}}
    entry = {"id": job or f"{framework}-{network}", "spec": cell,
             "status": status, "message": None if status == "ok" else "boom"}
    return entry, (result if status == "ok" else None)


def test_summary_row_formats_time_ci_and_throughput():
    (row,) = report.summary_rows([pair("pytorch", "fcn5")])
    half = 4.302653 * 0.01 / math.sqrt(3)  # t(2) x sd / sqrt(n)
    assert row == ("pytorch", "fcn5", "cpu", "16", "2", "ok", "1", "250.00",
                   f"±{half / 0.25:.1%}", "64.0", "4.0%", "-", "default", "-",
                   "")


def test_a_busy_host_is_the_note_before_what_it_explains():
    entry, result = pair("pytorch", "fcn5")
    busy, = hostcpu.warnings_for({"window_s": 10.0, "cpus": 2,
                                  "others_cpu_s": 9.0, "steal_s": 0.0,
                                  "idle_s": 0.0})
    result["warnings"] = [hstats.warnings_for([2.0, 1.0, 1.0, 1.0], 1)[-1],
                          busy]
    assert "warm-up too short" in result["warnings"][0]
    (row,) = report.summary_rows([(entry, result)])
    assert busy.startswith(row[-1].rstrip("…")), row[-1]
    assert "0.90 of its 2 CPUs" in row[-1]


def test_one_unit_per_column():
    """A 1.179 s cell beside a 660.97 ms one: both in ms."""
    rows = report.summary_rows([pair("pytorch", "fcn5", times=(1.179,) * 3),
                                pair("pytorch", "fcn8", times=(0.66097,) * 3)])
    assert [r[7] for r in rows] == ["1179.00", "660.97"]
    assert report.COLUMNS[7] == "mean ms/iter"


def test_processes_of_one_cell_make_one_row():
    rows = report.summary_rows([
        pair("pytorch", "fcn5", times=(0.20, 0.21), job="a"),
        pair("pytorch", "fcn5", times=(0.30, 0.31), job="a-p2"),
        pair("pytorch", "fcn5", status="error", job="a-p3")])
    (row,) = rows
    assert row[5] == "error 1/3" and row[6] == "3"
    assert row[7] == "255.00"
    assert row[11] != "-"  # the spread between the two processes
    assert row[-1] == "boom"


def test_between_process_spread_widens_the_interval():
    """Two steady processes that disagree: the interval over processes is
    far wider than one that trusts every iteration alike."""
    steady = [{"cell": {"global_batch_size": 4}, "status": "ok",
               "timing": {"per_iteration_s": [m, m, m, m, m + 1e-4]}}
              for m in (0.100, 0.120)]
    stats = aggregate.cell_stats(steady[0]["cell"], steady)
    assert stats.ci_basis == aggregate.BETWEEN
    assert stats.mean_s == pytest.approx(0.11002)
    assert stats.between_sd_s == pytest.approx(0.02 / math.sqrt(2))
    half = stats.ci95_s[1] - stats.mean_s
    assert half == pytest.approx(12.7062 * stats.between_sd_s / math.sqrt(2),
                                 rel=1e-4)
    assert half > 100 * stats.within_sd_s
    one = aggregate.cell_stats(steady[0]["cell"], steady[:1])
    assert one.ci_basis == aggregate.WITHIN and one.between_sd_s is None


def test_side_by_side_has_a_column_per_framework():
    lines = report.side_by_side([
        pair("pytorch", "fcn5", times=(0.5,) * 3),
        pair("mxnet", "fcn5", times=(2.0,) * 3),
        pair("pytorch", "lstm", times=(0.001,) * 3),
        pair("mxnet", "lstm", status="oom")])
    assert lines[0].split() == ["network", "device", "batch", "threads",
                                "pytorch", "ms/iter", "mxnet", "ms/iter"]
    assert lines[2].split() == ["fcn5", "cpu", "16", "2", "500.00", "2000.00"]
    assert lines[3].split() == ["lstm", "cpu", "16", "2", "1.00", "oom"]


def test_side_by_side_needs_two_frameworks():
    assert report.side_by_side([pair("pytorch", "fcn5")]) is None


def test_status_counts():
    assert report.status_counts([pair("a", "x"), pair("b", "x", "oom"),
                                 pair("c", "x")]) == {"ok": 2, "oom": 1}


# --- on the real command line ---------------------------------------------


def _retime(run_dir, network, series):
    """Give the processes of `network` these per-iteration times, with the
    warnings the harness writes for them."""
    entries = [e for e in store.read_run(run_dir)["jobs"]
               if e["spec"]["network"] == network]
    for entry, times in zip(entries, series):
        path = run_dir / entry["file"]
        result = json.loads(path.read_text())
        result["timing"]["per_iteration_s"] = list(times)
        result["warnings"] = hstats.warnings_for(list(times), 1)
        path.write_text(json.dumps(result))


def test_the_interval_is_students_t_in_the_table_csv_and_sqlite(tmp_path):
    """Issue 23, item 13: process means 0.0187, 0.0194, 0.0439 s gave the
    interval (0.0, 0.0635) beside a symmetric ±130.6%, and the note quoted
    the first process's CV (9.2%) beside the pooled CV column (5.4%)."""
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", SCRIPTED, "--network", "fcn5", "--network",
                  "fcn8", "--iterations", "4", "--warmup", "1", "--threads",
                  "1", "--repeat", "3", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    run_dir = (tmp_path / "latest").resolve()
    _retime(run_dir, "fcn5", [(m,) * 4 for m in (0.0187, 0.0194, 0.0439)])
    _retime(run_dir, "fcn8",
            [(0.0092, 0.0108) * 2] + [(0.0099, 0.0101) * 2] * 2)
    proc = invoke("report", "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["network"]: r for r in json.loads(proc.stdout)}
    # scipy.stats.t.interval(0.95, 2, mean, sem) of these three means
    low, high = -0.00831757699692199, 0.06298424366358865
    mean = (0.0187 + 0.0194 + 0.0439) / 3
    assert rows["fcn5"]["95% CI"] == f"±{(high - mean) / mean:.1%}"
    assert rows["fcn5"]["note"].startswith("95% CI reaches below 0 (-8.32 ms)")
    assert rows["fcn8"]["CV"] == "5.4%"
    assert rows["fcn8"]["note"].startswith(
        "high variation: within-process CV 5.4% exceeds 5%")
    db, table = tmp_path / "cells.db", tmp_path / "cells.csv"
    proc = invoke("export", "--out", str(tmp_path), "--csv", str(table),
                  "--sqlite", str(db))
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as con:
        (stored,) = con.execute("SELECT ci95_low_s, ci95_high_s FROM cells "
                                "WHERE network = 'fcn5'").fetchall()
    (written,) = [(float(r["ci95_low_s"]), float(r["ci95_high_s"]))
                  for r in csv.DictReader(open(table))
                  if r["network"] == "fcn5"]
    for interval in (stored, written):
        assert interval == pytest.approx((low, high), rel=1e-9)


def test_an_interval_below_0_says_what_to_raise():
    """Between processes the fix is more processes; within one process
    (no --repeat) more iterations."""
    cell = {"global_batch_size": 16}
    spread = [{"timing": {"per_iteration_s": [0.001, 0.001, 0.3]}}]
    within = aggregate.cell_stats(cell, spread)
    assert within.ci_basis == aggregate.WITHIN and within.ci95_s[0] < 0
    assert aggregate.warnings(within)[0].endswith(
        "its iterations spread too far; raise --iterations")
    means = [{"timing": {"per_iteration_s": [m, m]}}
             for m in (0.0187, 0.0194, 0.0439)]
    between = aggregate.cell_stats(cell, means)
    assert aggregate.warnings(between)[0].endswith(
        "the processes disagree; raise --repeat")
