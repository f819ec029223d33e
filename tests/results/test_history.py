"""The results database and what reads it, on the real command line:
`invoke export --db` into SQLite and into a real PostgreSQL server
(.ci/postgres.sh), `invoke history` across machines and over time, its
page in headless Chromium, and the step detector on known histories.

The runs are made by the fake harness (tests/bin/scripted-python, mode
ok@SECONDS): two runs at 10 ms per iteration, then two at 12 ms, so the
history of fcn5 has one known step. The "second machine" is honestly the
same runs exported again under another machine name (--machine).

PostgreSQL: DLREPRO_POSTGRES_URL (default the cluster .ci/postgres.sh
starts); each test gets a database of its own, dropped after. Without a
server the PostgreSQL tests skip; with DLREPRO_REQUIRE_POSTGRES set (CI)
they fail.
"""
import json
import random
import subprocess
import time

import pytest
from sqlalchemy import select, text

from dlrepro.history import machines, schema, steps
from browser import drawn, headless
from cli import invoke
from postgresenv import engine as _engine, postgres  # noqa: F401 (a fixture)
from paths import INVOKE, ROOT, SCRIPTED
import waits

TWIN = "twin (this host's runs, relabelled)"
# A real run of another machine: one H200, single-GPU real-data cells at
# the paper's batch sizes (docs/measurements/h200-2026-11-30).
H200_RUN = (ROOT / "docs" / "measurements" / "h200-2026-11-30"
            / "20261130T011657Z-paper-real-gpu-cff0")


@pytest.fixture(scope="module")
def history_runs(tmp_path_factory):
    """(results root, [run folders]): fcn5 at 10, 10, 12, 12 ms."""
    out = tmp_path_factory.mktemp("runs")
    folders = []
    ended = 0
    for seconds in (0.01, 0.01, 0.012, 0.012):
        waits.later_second(ended)
        proc = invoke("bench", "--framework", "pytorch", "--runtime",
                      "native", "--python", SCRIPTED, "--network", "fcn5",
                      "--network", "fcn8", "--iterations", "4", "--warmup",
                      "1", "--threads", "1", "--repeat", "2", "--out",
                      str(out), modes=f"fcn5=ok@{seconds}")
        assert proc.returncode == 0, proc.stderr
        ended = int(time.time())
        folders.append((out / "latest").resolve())
    return out, folders


def export(out, url, *extra):
    proc = invoke("export", "--out", str(out), "--all", "--db", url, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def export_two_machines(out, url):
    assert export(out, url) == ("database: 8 cells new, 0 updated, "
                                "0 unchanged\n")
    assert export(out, url, "--machine", TWIN) == (
        "database: 8 cells new, 0 updated, 0 unchanged\n")
    # Exporting again changes nothing.
    assert export(out, url, "--machine", TWIN) == (
        "database: 0 cells new, 0 updated, 8 unchanged\n")


def table(url, name, leave_out=()):
    with _engine(url).connect() as connection:
        # Through the schema's types: JSON columns come back as values.
        rows = connection.execute(
            select(schema.tables()[name])).mappings()
        found = [{k: v for k, v in r.items() if k not in leave_out}
                 for r in rows]
    return sorted(found, key=lambda r: json.dumps(r, sort_keys=True,
                                                  default=str))


def test_two_machines_give_the_same_rows_in_sqlite_and_postgresql(
        history_runs, postgres, tmp_path):
    out, folders = history_runs
    lite = f"sqlite:///{tmp_path / 'history.db'}"
    export_two_machines(out, lite)
    export_two_machines(out, postgres)
    cells = table(lite, "cells")
    assert len(cells) == 16 == len({(c["machine"], c["run_id"], c["cell_id"])
                                    for c in cells})
    assert cells == table(postgres, "cells")
    # The run rows too, but for when each database got them.
    assert table(lite, "runs", ["exported_at"]) == table(
        postgres, "runs", ["exported_at"])
    (run,) = {(r["hostname"], r["cpus"], r["cpu_model"])
              for r in table(lite, "runs")}
    assert {c["machine"] for c in cells} == {
        TWIN, f"{run[0]} ({run[1]} CPUs, {run[2]})"}
    assert {c["phase_times"] for c in cells} == {None}
    # Which dlrepro made each run: this checkout's commit.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    assert {r["dlrepro_commit"] for r in table(lite, "runs")} == {head}
    fcn5 = sorted((c["run_id"], c["mean_s"]) for c in cells
                  if c["network"] == "fcn5" and c["machine"] == TWIN)
    assert [m for _r, m in fcn5] == pytest.approx([0.01, 0.01, 0.012, 0.012])


def _concurrent_exports(out, url, machines):
    procs = [subprocess.Popen(
        [INVOKE, "export", "--out", str(out), "--all", "--db", url,
         "--machine", machine], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for machine in machines]
    return [(p.wait(timeout=300), *p.communicate()) for p in procs]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_writers_merge_without_loss(history_runs, backend,
                                               tmp_path, request):
    out, _folders = history_runs
    url = (f"sqlite:///{tmp_path / 'h.db'}" if backend == "sqlite"
           else request.getfixturevalue("postgres"))
    # Four exporters at once on a new database: two machines, each twice
    # (the same rows raced), and all of them migrating it.
    ended = _concurrent_exports(out, url, ["a", "b", "a", "b"])
    assert [code for code, _o, _e in ended] == [0] * 4, ended
    news = sorted(int(o.split()[1]) for _c, o, _e in ended)
    assert sum(news) == 16, ended   # each row written once, by someone
    rows = table(url, "cells")
    assert len(rows) == 16 and {r["machine"] for r in rows} == {"a", "b"}
    assert table(url, "dlrepro_schema") == [{"version": schema.VERSION}]


def test_a_version_1_database_is_migrated(history_runs, tmp_path):
    out, _folders = history_runs
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with _engine(url).begin() as connection:
        schema.MIGRATIONS[0](connection)
    export(out, url)
    assert table(url, "dlrepro_schema") == [{"version": schema.VERSION}]
    assert {r["phase_times"] for r in table(url, "cells")} == {None}


def test_a_database_newer_than_this_dlrepro_is_refused(history_runs,
                                                       tmp_path):
    out, _folders = history_runs
    url = f"sqlite:///{tmp_path / 'new.db'}"
    export(out, url)
    with _engine(url).begin() as connection:
        connection.execute(text("UPDATE dlrepro_schema SET version = 99"))
    proc = invoke("export", "--out", str(out), "--all", "--db", url)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: the database has schema version 99; "
                           f"this dlrepro knows up to {schema.VERSION}: "
                           "update it\n")


@pytest.mark.parametrize("target, message", [
    ("nosuch://x", "error: cannot use database nosuch://x: "),
    ("/no/such/folder/h.db", "error: cannot open /no/such/folder/h.db: "
                             "no folder /no/such/folder\n"),
    ("postgresql://u:secret@127.0.0.1:1/db",
     "error: database postgresql+psycopg://u:***@127.0.0.1:1/db: "),
])
def test_a_bad_database_is_one_line(history_runs, target, message):
    out, _folders = history_runs
    proc = invoke("export", "--out", str(out), "--all", "--db", target)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1
    assert "secret" not in proc.stderr


def test_history_sets_machines_side_by_side_and_finds_the_step(
        history_runs, tmp_path):
    out, folders = history_runs
    db = tmp_path / "h.db"
    export(out, str(db))
    export(out, str(db), "--machine", TWIN)
    page = tmp_path / "history.html"
    proc = invoke("history", "--db", str(db), "--network", "fcn5",
                  "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ms per mini-batch, the latest run of each")
    row = next(line for line in lines if line.startswith("pytorch fcn5"))
    assert row.split()[-2:] == ["12.000", "12.000"]
    assert "the machines differ in no recorded fact" in proc.stdout
    assert "2 cell histories, 2 with a step" in proc.stdout
    step = (f"stepped from 10.000 to 12.000 ms at run {folders[2].name} ")
    stepped = [line for line in lines if step in line]
    assert len(stepped) == 2 and all("ratio 1.200" in s for s in stepped)
    assert lines[-1].startswith(f"history page: {page} (3 figures, ")
    dom, console = headless(page, tmp_path / "profile",
                            "--window-size=1600,900", "--dump-dom")
    assert console == []
    assert drawn(dom)[:2] == (3, 3)
    # Filters: one machine has no other to compare with; another suite
    # has no cells.
    proc = invoke("history", "--db", str(db), "--machine", TWIN,
                  "--suite", "smoke")
    assert proc.stdout.splitlines()[0].startswith("no cell was measured on")
    assert "2 cell histories, 1 with a step" in proc.stdout
    proc = invoke("history", "--db", str(db), "--suite", "paper-real-cpu")
    assert proc.returncode == 2 and proc.stderr == (
        f"error: no cells in sqlite:///{db} match the filters\n")


def test_history_of_a_missing_database_is_one_line(tmp_path):
    proc = invoke("history", "--db", str(tmp_path / "none.db"))
    assert proc.returncode == 2
    assert proc.stderr == (f"error: no results database at "
                           f"{tmp_path / 'none.db'}: make one with "
                           "`invoke export --db`\n")


def test_another_real_machine_and_the_2016_reference(history_runs,
                                                     tmp_path):
    out, _folders = history_runs
    db = str(tmp_path / "h.db")
    # Both hosts call themselves "vm": the default machine name tells
    # them apart by their CPUs.
    proc = invoke("export", "--run", str(H200_RUN), "--db", db)
    assert proc.stdout == "database: 4 cells new, 0 updated, 0 unchanged\n"
    export(out, db)
    proc = invoke("history", "--db", db, "--network", "fcn-r")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    h200 = "vm (16 CPUs, Intel(R) Xeon(R) Processor)"
    assert lines[1].split("  ")[-2:] == [h200, "2016 Tesla K80 (one GK210)"]
    assert lines[2].split() == ["pytorch", "fcn-r", "b1024", "gpu", "1",
                                "GPU", "native", "2.522", "50.761"]
    assert lines[3].startswith("2016: raw runs posted by the paper's")
    assert lines[4] == f"one measured machine ({h200}) beside the 2016 " \
                       "reference"
    proc = invoke("history", "--db", db, "--network", "fcn-r",
                  "--no-reference")
    assert proc.stdout.splitlines()[0].startswith(
        "no cell was measured on two or more machines")


def _row(machine, **facts):
    cell = {"framework": "pytorch", "network": "fcn5", "device": "cpu",
            "global_batch_size": 16, "threads": 1, "gpus": 0,
            "runtime": "native"}
    return {"machine": machine, "cell_key": json.dumps(cell), **cell,
            "status": "ok", "mean_s": 0.01, "ci95_low_s": 0.009,
            "ci95_high_s": 0.011, "run_started_at": "2026-12-01T00:00:00Z",
            "framework_version": "2.13.0", "run_cpu_model": "AMD EPYC",
            **facts}


def test_what_differs_between_machines_is_named():
    rows = [_row("a"), _row("b", framework_version="2.14.0")]
    names, found = machines.table(rows)
    assert names == ["a", "b"] and len(found) == 1
    assert machines.differences(rows, names) == [
        ("framework", {"a": "2.13.0", "b": "2.14.0"})]
    # Not the same cell: another thread count is never set beside it.
    other = dict(_row("b"), cell_key=json.dumps({"threads": 2}))
    assert machines.table([_row("a"), other]) == ([], [])


def test_a_real_pytorch_history_end_to_end(framework_python, postgres,
                                           tmp_path):
    out = tmp_path / "runs"
    for _ in range(2):
        proc = invoke("bench", "--framework", "pytorch", "--runtime",
                      "native", "--python", str(framework_python("pytorch")),
                      "--network", "fcn-r", "--batch-size", "16",
                      "--threads", "1", "--iterations", "5", "--warmup", "1",
                      "--out", str(out), timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    lite = f"sqlite:///{tmp_path / 'h.db'}"
    for url in (lite, postgres):
        assert export(out, url) == ("database: 2 cells new, 0 updated, "
                                    "0 unchanged\n")
    cells = table(lite, "cells")
    assert cells == table(postgres, "cells") and len(cells) == 2
    assert {c["framework_version"] for c in cells} == {"2.13.0+cpu"}
    page = tmp_path / "history.html"
    proc = invoke("history", "--db", postgres, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert "1 cell histories, " in proc.stdout
    dom, console = headless(page, tmp_path / "profile",
                            "--window-size=1600,900", "--dump-dom")
    assert console == [] and drawn(dom)[:2] == (0, 0)


def _noisy(rng, n, cv, step_at=None, factor=1.0):
    return [0.1 * (factor if step_at is not None and i >= step_at else 1)
            * (1 + rng.gauss(0, cv)) for i in range(n)]


def test_steps_none_in_a_flat_history_one_in_a_stepped_one():
    rng = random.Random(7)
    assert steps.detect(_noisy(rng, 30, 0.01)) == []
    (found,) = steps.detect(_noisy(rng, 30, 0.01, step_at=18, factor=1.05))
    assert abs(found.index - 18) <= 1 and found.ratio == pytest.approx(
        1.05, abs=0.015) and found.ci95[0] > 1


def test_one_outlying_run_is_not_a_step():
    values = [0.1] * 10 + [0.2] + [0.1] * 10
    assert steps.detect(values) == []
