"""invoke export: one row per cell, as CSV and merged into SQLite."""
import csv
import sqlite3

from disks import fill
from cli import invoke
from paths import SCRIPTED


def bench(out, *extra, modes=""):
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", SCRIPTED, "--network", "fcn5", "--network",
                  "fcn8", "--iterations", "4", "--warmup", "1", "--threads",
                  "1", "--out", str(out), *extra, modes=modes)
    assert proc.returncode == 0, proc.stderr
    return (out / "latest").resolve()


def test_runs_merge_into_one_database_and_a_csv(tmp_path):
    first = bench(tmp_path, "--repeat", "2")
    second = bench(tmp_path, modes="fcn8=crash")
    db = tmp_path / "all.db"
    for _ in range(2):  # exporting again replaces, never duplicates
        proc = invoke("export", "--out", str(tmp_path), "--all", "--sqlite",
                      str(db), "--csv", str(tmp_path / "all.csv"))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "4 cells exported\n"
    with sqlite3.connect(db) as con:
        got = con.execute("SELECT run_id, network, status, processes, "
                          "ci_basis, mean_s FROM cells").fetchall()
    by_run = {(g[0], g[1]): g[2:] for g in got}
    assert len(got) == 4 and by_run == {
        (first.name, "fcn5"): ("ok", 2, "between-process", 0.01),
        (first.name, "fcn8"): ("ok", 2, "between-process", 0.01),
        (second.name, "fcn5"): ("ok", 1, "within-process", 0.01),
        (second.name, "fcn8"): ("error", None, None, None)}
    rows = list(csv.DictReader(open(tmp_path / "all.csv")))
    (failed,) = [r for r in rows if r["status"] == "error"]
    assert len(rows) == 4 and failed["message"].startswith(
        "the harness exited with status 3")


def test_export_needs_a_destination(tmp_path):
    proc = invoke("export", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == ("error: give --csv FILE, --sqlite FILE, --db URL "
                           "or several\n")


def test_a_full_disk_leaves_no_file_behind_and_the_old_one_whole(
        tmp_path, small_disk):  # noqa: F811
    """Issue 23, item 12: on a full disk `export` and `report --html` left
    a 0-byte file where the user asked for the output."""
    bench(tmp_path)
    kept = small_disk / "kept.db"
    proc = invoke("export", "--out", str(tmp_path), "--sqlite", str(kept))
    assert proc.returncode == 0, proc.stderr
    before = kept.read_bytes()
    fill(small_disk)
    for task, flag, name in (("export", "--csv", "new.csv"),
                             ("export", "--sqlite", "new.db"),
                             ("export", "--sqlite", "kept.db"),
                             ("report", "--html", "new.html")):
        proc = invoke(task, "--out", str(tmp_path), flag,
                      str(small_disk / name))
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: cannot write "), proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler",
                                                            "kept.db"]
    assert kept.read_bytes() == before
