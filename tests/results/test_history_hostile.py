"""The results database as a hostile user drives it, on the real command
line: `invoke history` (a read) never writes, not into another program's
SQLite file, nor into a flat `--sqlite` export, nor by migrating an older
database (which it reads, even on read-only media); `export` migrates and
says so; databases it cannot keep (MySQL, Oracle, SQL Server, an in-memory
SQLite) are refused in one line; a run exported before its first result is
left for later rather than filed under a machine name its results would
not give; a PostgreSQL table locked by another session is given up on
after db.LOCK_WAIT_S, in one line; `--machine` takes no control
characters.

Runs come from the scripted harness (tests/bin/scripted-python);
PostgreSQL is the server .ci/postgres.sh starts (tests/postgresenv.py's
`postgres` fixture: a fresh database per test)."""
import hashlib
import sqlite3
import subprocess
import time
from contextlib import closing

import pytest
from sqlalchemy import text

from dlrepro.history import db as history_db
from dlrepro.history import schema
from scripted import BENCH, invoke, start
from postgresenv import engine as _engine, postgres  # noqa: F401 (a fixture)
from waits import wait_for


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    done = invoke(*BENCH, "--out", str(out), "--network", "fcn5")
    assert done.returncode == 0, done.stderr
    return out


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sqlite_tables(path):
    with closing(sqlite3.connect(path)) as connection:
        return sorted(name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"))


def test_history_writes_nothing_into_a_database_not_its_own(one_run,
                                                            tmp_path):
    other = tmp_path / "notes.db"
    with closing(sqlite3.connect(other)) as connection, connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
    flat = tmp_path / "cells.sqlite"
    assert invoke("export", "--out", str(one_run), "--sqlite",
                  str(flat)).returncode == 0
    for path, tables, extra in ((other, ["notes"], ""),
                                (flat, ["cells"], "; a flat `--sqlite` "
                                 "export is read by other tools, not by "
                                 "`invoke history`")):
        before = digest(path)
        done = invoke("history", "--db", str(path))
        assert done.returncode == 2
        assert done.stderr == (
            f"error: database sqlite:///{path}: not a dlrepro results "
            f"database (no table dlrepro_schema{extra}): make one with "
            "`invoke export --db`\n")
        assert digest(path) == before and sqlite_tables(path) == tables
    # Nor does export mix its rows into the flat file's table.
    done = invoke("export", "--out", str(one_run), "--db", str(flat))
    assert done.returncode == 2 and done.stderr == (
        f"error: sqlite:///{flat} is not a dlrepro results database: it has "
        "table(s) cells but no dlrepro_schema (another program's, or a flat "
        "`--sqlite` export); give --db a new database\n")
    assert sqlite_tables(flat) == ["cells"]


# The columns schema versions 2 and 3 added to `cells`.
AFTER_VERSION_1 = {"phase_times", "isolation"}


def version_1_database(out, path):
    """A results database as dlrepro's schema version 1 wrote it."""
    assert invoke("export", "--out", str(out), "--db",
                  str(path)).returncode == 0
    with closing(sqlite3.connect(path)) as connection, connection:
        have = {row[1] for row in connection.execute(
            "PRAGMA table_info(cells)")}
        for column in AFTER_VERSION_1 & have:
            connection.execute(f"ALTER TABLE cells DROP COLUMN {column}")
        connection.execute("UPDATE dlrepro_schema SET version = 1")


@pytest.fixture
def read_only_folder(tmp_path):
    """(folder, make_read_only): a folder seen through a bind mount that
    `make_read_only()` turns read-only (read-only media's stand-in)."""
    source, media = tmp_path / "source", tmp_path / "media"
    source.mkdir()
    media.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(media)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here (read-only media stand-in): "
                    f"{mounted.stderr.strip()}")

    def read_only():
        subprocess.run(["mount", "-o", "remount,bind,ro", str(media)],
                       check=True)
    yield media, read_only
    subprocess.run(["umount", str(media)], check=True)


def test_an_older_database_on_read_only_media_is_read_not_migrated(
        one_run, tmp_path, read_only_folder):
    media, read_only = read_only_folder
    old = media / "history.db"
    version_1_database(one_run, old)
    before = digest(old)
    read_only()
    done = invoke("history", "--db", str(old))
    assert done.returncode == 0, done.stderr
    assert "1 cell histories, 0 with a step" in done.stdout
    assert digest(old) == before
    # export migrates a copy, and says so.
    copy = tmp_path / "copy.db"
    copy.write_bytes(old.read_bytes())
    done = invoke("export", "--out", str(one_run), "--db", str(copy))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"database: schema migrated from version 1 to {schema.VERSION}",
        "database: 0 cells new, 1 updated, 0 unchanged"]


def test_history_reads_an_older_postgresql_database_as_it_is(
        one_run, postgres):  # noqa: F811
    assert invoke("export", "--out", str(one_run), "--db",
                  postgres).returncode == 0
    with _engine(postgres).begin() as connection:
        for column in AFTER_VERSION_1:
            connection.execute(text(f"ALTER TABLE cells DROP COLUMN IF "
                                    f"EXISTS {column}"))
        connection.execute(text("UPDATE dlrepro_schema SET version = 1"))
    done = invoke("history", "--db", postgres)
    assert done.returncode == 0, done.stderr
    assert "1 cell histories, 0 with a step" in done.stdout
    with _engine(postgres).connect() as connection:
        assert connection.execute(text(
            "SELECT version FROM dlrepro_schema")).scalar() == 1


@pytest.mark.parametrize("target, message", [
    ("mysql://u:secret@127.0.0.1/db", "cannot use database "
     "mysql://u:***@127.0.0.1/db: the results database runs on SQLite or "
     "PostgreSQL, not mysql"),
    ("oracle://u:secret@127.0.0.1/db", "cannot use database "
     "oracle://u:***@127.0.0.1/db: the results database runs on SQLite or "
     "PostgreSQL, not oracle"),
    ("mssql://u:secret@127.0.0.1/db", "cannot use database "
     "mssql://u:***@127.0.0.1/db: the results database runs on SQLite or "
     "PostgreSQL, not mssql"),
    ("sqlite://", "cannot use database sqlite://: an in-memory SQLite "
     "database vanishes when the command ends; name a file "
     "(sqlite:///PATH or a path)"),
    ("sqlite:///:memory:", "cannot use database sqlite:///:memory:: an "
     "in-memory SQLite database vanishes when the command ends; name a "
     "file (sqlite:///PATH or a path)"),
])
def test_a_database_it_cannot_keep_is_one_line(one_run, target, message):
    for command in (["export", "--out", str(one_run), "--db", target],
                    ["history", "--db", target]):
        done = invoke(*command)
        assert (done.returncode, done.stderr) == (2, f"error: {message}\n")


# export reads a stored row back only where it compares it with its own
# (the JSON columns decoded) and checks the version: it overwrites a
# damaged number or key with the run's own.
@pytest.mark.parametrize("damage, message, export_too", [
    ("UPDATE cells SET process_means_s = 'notjson'",
     "a stored JSON value is damaged", True),
    ("UPDATE cells SET phase_times = '{bad'",
     "a stored JSON value is damaged", True),
    ("UPDATE dlrepro_schema SET version = 'x'",
     "the database's schema version is 'x', not a number", True),
    ("UPDATE cells SET mean_s = 'abc'", "its mean_s 'abc' or process_means_s",
     False),
    ("UPDATE cells SET mean_s = -1", "its mean_s -1.0 or process_means_s",
     False),
    ("UPDATE cells SET cell_key = '[1]'", "its cell_key is not a JSON object",
     False),
], ids=["means-not-json", "phases-not-json", "version-word", "mean-word",
        "mean-negative", "key-a-list"])
def test_a_damaged_database_row_is_one_line(one_run, tmp_path, damage,
                                            message, export_too):
    """A row edited by another program or a hand: JSON, type and domain
    errors (JSONDecodeError, TypeError, math domain error) were tracebacks
    in `history` and in `export` into it."""
    path = tmp_path / "history.db"
    assert invoke("export", "--out", str(one_run), "--db",
                  str(path)).returncode == 0
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(damage)
    commands = [["history", "--db", str(path)]]
    if export_too:
        commands.append(["export", "--out", str(one_run), "--db", str(path)])
    for command in commands:
        done = invoke(*command)
        assert done.returncode == 2, (command, done.stdout + done.stderr)
        assert message in done.stderr, (command, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr


def test_a_run_without_a_result_yet_is_left_for_later(tmp_path):
    out, db = tmp_path / "runs", tmp_path / "history.db"
    # fcn5 takes 21 one-second iterations: time to export before its
    # result exists.
    args = [a for a in BENCH if a not in ("--iterations", "3")]
    proc = start(*args, "--iterations", "20", "--out", str(out),
                 "--network", "fcn5", modes="fcn5=slow")
    try:
        run_dir = wait_for(lambda: (out / "latest").exists() and
                           (out / "latest").resolve())
        wait_for(lambda: list(run_dir.glob("*.log")))
        early = invoke("export", "--out", str(out), "--db", str(db))
        assert not (run_dir / "pytorch-cpu-fcn5-cpu-b16-t1.json").exists()
        assert early.returncode == 0, early.stderr
        assert early.stdout == (
            "database: 0 cells new, 0 updated, 0 unchanged; 1 run(s) with "
            "no result yet left for a later export\n")
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    done = invoke("export", "--out", str(out), "--db", str(db))
    assert done.stdout == "database: 1 cells new, 0 updated, 0 unchanged\n"
    with _engine(f"sqlite:///{db}").connect() as connection:
        machines = connection.execute(
            text("SELECT DISTINCT machine FROM runs")).scalars().all()
    assert len(machines) == 1 and machines[0].endswith(")")
    assert " CPUs, " in machines[0]


# db.LOCK_WAIT_S, written out so that a dlrepro without it fails here by
# waiting, as it did, not by a missing name.
LOCK_WAIT_S = 60


def test_a_locked_postgresql_table_is_given_up_on(one_run, postgres):  # noqa: F811
    assert invoke("export", "--out", str(one_run), "--db",
                  postgres).returncode == 0
    holder = _engine(postgres).connect()
    try:
        holder.begin()
        holder.execute(text("LOCK TABLE cells IN ACCESS EXCLUSIVE MODE"))
        began = time.monotonic()
        done = invoke("export", "--out", str(one_run), "--db", postgres,
                      timeout=LOCK_WAIT_S + 120)
        waited = time.monotonic() - began
    finally:
        holder.rollback()
        holder.close()
    assert done.returncode == 2
    assert done.stderr.startswith("error: database postgresql+psycopg://")
    assert done.stderr.endswith(
        f": another session held it locked for {LOCK_WAIT_S} s; gave up, "
        "nothing written (run again when it is free)\n")
    assert LOCK_WAIT_S <= waited < LOCK_WAIT_S + 60
    assert history_db.LOCK_WAIT_S == LOCK_WAIT_S


@pytest.mark.parametrize("name", ["a\x1b[31mb", "two\nlines", "tab\there",
                                  " ", "m" * 201])
def test_a_machine_name_with_control_characters_is_refused(one_run,
                                                           tmp_path, name):
    db = tmp_path / "history.db"
    done = invoke("export", "--out", str(one_run), "--db", str(db),
                  "--machine", name)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: --machine ")
    assert not db.exists()
