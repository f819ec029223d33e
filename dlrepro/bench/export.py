"""Runs as rows: one row per cell with its identity fields and statistics,
written as CSV or into a SQLite database (merged by run and cell, so the
runs of several machines can be gathered into one file and queried).

`isolation` is no part of a cell's identity but can change its time: the
mode its processes ran under (isolation_of), a column of its own."""
import csv
import sqlite3
from contextlib import closing

from harness.spec import CELL_FIELDS

from dlrepro import outfile
from dlrepro.bench import aggregate, report
from dlrepro.errors import UserError
from dlrepro.run import groups

STAT_FIELDS = ("status", "isolation", "processes", "mean_s", "ci95_low_s", "ci95_high_s",
               "ci_basis", "between_sd_s", "within_sd_s", "samples_per_s",
               "framework_version", "python_version", "host", "cpu_model",
               "gpu", "image", "image_digest", "message")
FIELDS = ("run_id", "cell_id") + CELL_FIELDS + STAT_FIELDS


def rows(record, job_results):
    """One dict per cell of a run (record and job results from
    dlrepro.run.store)."""
    out = []
    for spec, members in aggregate.cells(job_results):
        first, cell, row = cell_row(record, spec, members)
        row.update({k: cell.get(k) for k in CELL_FIELDS})
        row.update(_stats(aggregate.ok_results(members)))
        row.update(_provenance(first))
        out.append(row)
    return out


def cell_row(record, spec, members):
    """What a cell's row starts from, here and in the results database:
    its first result (None when no process left one), the cell as run
    (else as planned), and the row's run, cell, status and message."""
    first = next((r for _e, r in members if r is not None), None)
    cell = first["cell"] if first else spec
    return first, cell, {
        "run_id": record["run_id"], "cell_id": members[0][0]["id"],
        "status": report.status_of(members),
        "isolation": isolation_of(record, members),
        "message": next((e["message"] for e, _r in members
                         if e.get("message")), None)}


def isolation_of(record, members):
    """The mode of the processes a cell's figures come from (its ok ones,
    else all): `cell`, `group`, or `cell+group` when they differ."""
    ok = [(e, r) for e, r in members if r is not None and e["status"] == "ok"]
    return groups.modes_label(groups.process_mode(record, e, r)
                              for e, r in ok or members)


def _stats(ok):
    if not ok:
        return {k: None for k in ("processes", "mean_s", "ci95_low_s",
                                  "ci95_high_s", "ci_basis", "between_sd_s",
                                  "within_sd_s", "samples_per_s")}
    return stat_columns(aggregate.cell_stats(ok[0]["cell"], ok))


def stat_columns(stats):
    """A cell's combined figures (aggregate.CellStats) as row columns: the
    CSV's and SQLite's, and the results database's."""
    return {"processes": stats.processes, "mean_s": stats.mean_s,
            "ci95_low_s": stats.ci95_s[0], "ci95_high_s": stats.ci95_s[1],
            "ci_basis": stats.ci_basis, "between_sd_s": stats.between_sd_s,
            "within_sd_s": stats.within_sd_s,
            "samples_per_s": stats.samples_per_s}


def _provenance(result):
    env = (result or {}).get("environment") or {}
    container = env.get("container") or {}
    gpus = env.get("gpus") or []
    return {"framework_version": env.get("framework_version"),
            "python_version": env.get("python_version"),
            "host": env.get("host"), "cpu_model": env.get("cpu_model"),
            "gpu": ", ".join(g.get("name") or "?" for g in gpus) or None,
            "image": container.get("image"),
            "image_digest": container.get("digest")}


def _value(value):
    return value if value is None or isinstance(value, (int, float, str)) \
        else str(value)


def write_csv(path, all_rows):
    with outfile.replacing(path) as tmp:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            for row in all_rows:
                writer.writerow({k: _value(row[k]) for k in FIELDS})


def write_sqlite(path, all_rows):
    """Insert or replace the rows in table `cells` (key: run_id, cell_id),
    in a copy of the database that replaces it once complete."""
    columns = ", ".join(f'"{k}"' for k in FIELDS)
    with outfile.replacing(path, start_from_existing=True) as tmp:
        try:
            with closing(sqlite3.connect(tmp)) as db, db:
                db.execute(f"CREATE TABLE IF NOT EXISTS cells ({columns}, "
                           f"PRIMARY KEY (run_id, cell_id))")
                _add_new_columns(db)
                db.executemany(
                    f"INSERT OR REPLACE INTO cells ({columns}) VALUES "
                    f"({', '.join('?' for _ in FIELDS)})",
                    [tuple(_value(row[k]) for k in FIELDS)
                     for row in all_rows])
        except sqlite3.Error as exc:
            raise UserError(f"cannot write {path}: {exc}")


def _add_new_columns(db):
    """The columns a file written by an older dlrepro lacks (isolation),
    added; its rows keep null there."""
    have = {row[1] for row in db.execute("PRAGMA table_info(cells)")}
    for name in FIELDS:
        if name not in have:
            db.execute(f'ALTER TABLE cells ADD COLUMN "{name}"')
