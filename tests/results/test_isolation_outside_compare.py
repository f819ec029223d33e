"""The isolation mode outside `compare`, on the real command line: the
HTML report names the mode of each row's processes and warns where a row
pools both; the CSV, the flat SQLite file and the results database carry
it; `invoke history` filters on it, names it under "what differs", and
names a change of mode at a step.

The runs come from the scripted harness (tests/bin/scripted-python, mode
ok@SECONDS): fcn5 and fcn8 twice one process per cell at 10 ms an
iteration, then twice in a group's worker at 12 ms (a default that moved
a framework into a worker and made it slower, as the hostile user saw)."""
import csv
import sqlite3
import time

import pytest

import waits
from scripted import BENCH, invoke

CELL_MS, GROUP_MS = 0.010, 0.012


@pytest.fixture(scope="module")
def mode_runs(tmp_path_factory):
    """(results root, [cell run, cell run, group run, group run])."""
    out = tmp_path_factory.mktemp("runs")
    folders = []
    ended = 0
    for seconds, mode in ((CELL_MS, "cell"), (CELL_MS, "cell"),
                          (GROUP_MS, "group"), (GROUP_MS, "group")):
        # Two runs started in one second have no order (the step was then
        # seen at the wrong run).
        waits.later_second(ended)
        done = invoke(*BENCH, "--out", str(out), "--network", "fcn5",
                      "--network", "fcn8", "--isolation", mode,
                      modes=f"fcn5=ok@{seconds},fcn8=ok@{seconds}")
        assert done.returncode == 0, done.stderr
        ended = int(time.time())
        folders.append((out / "latest").resolve())
    return out, folders


def page(out, tmp_path, *runs):
    path = tmp_path / "report.html"
    args = [a for run in runs for a in ("--run", str(run))]
    done = invoke("report", "--out", str(out), *args, "--html", str(path))
    assert done.returncode == 0, done.stderr
    return path.read_text()


def test_the_html_report_names_each_rows_mode_and_warns_on_a_pool(
        mode_runs, tmp_path):
    out, folders = mode_runs
    alone = page(out, tmp_path, folders[2])
    assert "<th>isolation</th>" in alone
    assert alone.count("<td>group</td>") == 2
    assert "Isolation:" not in alone
    pooled = page(out, tmp_path, folders[0], folders[2])
    assert pooled.count("<td>cell+group</td>") == 2
    assert ('<p class="warn">Isolation: pytorch fcn5, pytorch fcn8 pool '
            "processes that ran one cell each with processes of a "
            "group&#x27;s worker") in pooled


def test_csv_sqlite_and_the_database_carry_the_mode(mode_runs, tmp_path):
    out, folders = mode_runs
    flat, lite = tmp_path / "cells.csv", tmp_path / "cells.sqlite"
    db = tmp_path / "history.db"
    done = invoke("export", "--out", str(out), "--all", "--csv", str(flat),
                  "--sqlite", str(lite), "--db", str(db))
    assert done.returncode == 0, done.stderr
    expected = sorted((folder.name, mode) for folder, mode in zip(
        folders, ("cell", "cell", "group", "group")) for _network in "ab")
    with open(flat, newline="") as handle:
        assert sorted((r["run_id"], r["isolation"])
                      for r in csv.DictReader(handle)) == expected
    for path, query in ((lite, "SELECT run_id, isolation FROM cells"),
                        (db, "SELECT run_id, isolation FROM cells")):
        with sqlite3.connect(path) as connection:
            assert sorted(connection.execute(query)) == expected, path


def history(db, *args):
    done = invoke("history", "--db", str(db), "--network", "fcn5", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_history_names_the_mode_at_a_step_and_filters_on_it(mode_runs,
                                                              tmp_path):
    out, folders = mode_runs
    db = tmp_path / "history.db"
    assert invoke("export", "--out", str(out), "--all", "--db",
                  str(db)).returncode == 0
    stepped = history(db)
    assert "1 cell histories, 1 with a step" in stepped
    step = next(line for line in stepped.splitlines() if "stepped" in line)
    assert f"at run {folders[2].name} " in step
    assert step.endswith("; isolation changed there, cell -> group: the "
                         "step may be the process's, not the framework's")
    for mode in ("cell", "group"):
        assert "1 cell histories, 0 with a step" in history(
            db, "--isolation", mode)
    done = invoke("history", "--db", str(db), "--isolation", "process")
    assert done.returncode == 2 and done.stderr == (
        "error: unknown --isolation 'process'; valid: cell, group, fork, "
        "or several joined by + (cell+group)\n")


def test_history_names_the_mode_under_what_differs(mode_runs, tmp_path):
    out, folders = mode_runs
    db = tmp_path / "history.db"
    for machine, runs in (("one", folders[:1]), ("other", folders[2:3])):
        done = invoke("export", "--out", str(out), "--run", str(runs[0]),
                      "--db", str(db), "--machine", machine)
        assert done.returncode == 0, done.stderr
    lines = history(db).splitlines()
    at = lines.index("what differs between the machines:")
    assert lines[at + 1:at + 2] == ["  isolation: one: cell; other: group"]
