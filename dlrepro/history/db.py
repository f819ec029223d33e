"""The results database: run folders in, rows out, through SQLAlchemy Core.

A URL names it: `sqlite:///results/history.db` (or just a path: SQLite is
the default, one embedded file) or `postgresql://user:pass@host/db` for a
team (driven by psycopg 3). Every finished cell of a run becomes one row
keyed by (machine, run, cell); re-exporting a run changes nothing (a row
is written only when new or different), and machines exporting into one
database merge, since a machine's rows never share its key with another's.
The machine is the host name the run recorded with its CPU count and model
(machine_name) unless the exporter names it.

Only `export` writes: it creates the tables or migrates an older schema
(connect). A reader (open_to_read) never does: it opens SQLite read-only
and PostgreSQL in read-only transactions, and reads an older schema as it
is. Either gives up after LOCK_WAIT_S on a database another session holds
locked.
"""
import json
import sqlite3
import urllib.parse
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from harness.blocks import utc_now
from harness.spec import CELL_FIELDS

from dlrepro.bench import aggregate
from dlrepro.bench.export import cell_row, stat_columns
from dlrepro.errors import UserError
from dlrepro.history import schema
from dlrepro.run import runrecord
from dlrepro.run.kinds import KINDS

# Any fixed number: the advisory lock that serialises migrations on
# PostgreSQL (every dlrepro exporter asks for the same one).
_MIGRATION_LOCK = 1608072490
BACKENDS = ("sqlite", "postgresql")
# How long a statement waits for a lock another session holds (SQLite's
# busy timeout, PostgreSQL's lock_timeout) before the command gives up.
LOCK_WAIT_S = 60
# PostgreSQL's code for a lock_timeout that ran out (lock_not_available).
_LOCK_NOT_AVAILABLE = "55P03"


def url_of(target):
    """A SQLAlchemy URL from a URL or a plain path (SQLite)."""
    if "://" not in target:
        return f"sqlite:///{Path(target).expanduser()}"
    if target.startswith(("postgresql://", "postgres://")):
        # SQLAlchemy's default PostgreSQL driver is psycopg2; ours is 3.
        return "postgresql+psycopg://" + target.split("://", 1)[1]
    return target


def _sqlite_serialised(engine):
    """Make each SQLite transaction take the write lock when it begins, so
    concurrent exporters queue (for up to a minute) instead of failing on
    a lock upgrade."""
    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _url(target):
    """The checked SQLAlchemy URL of `target`: SQLite (a file) or
    PostgreSQL, nothing else."""
    try:
        url = make_url(url_of(target))
    except ArgumentError as exc:
        raise UserError(f"not a database URL: {target} ({exc})")
    backend = url.get_backend_name()
    if backend not in BACKENDS:
        raise UserError(f"cannot use database {safe_url(target)}: the "
                        f"results database runs on SQLite or PostgreSQL, "
                        f"not {backend}")
    if backend == "sqlite":
        if _in_memory(url):
            raise UserError(f"cannot use database {target}: an in-memory "
                            "SQLite database vanishes when the command "
                            "ends; name a file (sqlite:///PATH or a path)")
        folder = Path(url.database).parent
        if not folder.is_dir():
            raise UserError(f"cannot open {url.database}: no folder {folder}")
    return url


def _in_memory(url):
    database = url.database or ""
    return (database in ("", ":memory:") or database.startswith(
        "file::memory:") or url.query.get("mode") == "memory")


def _engine(target, url, **kwargs):
    try:
        return create_engine(url, **kwargs)
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise UserError(f"cannot use database {safe_url(target)}: {exc}")


def _postgres_args(read_only=False):
    options = f"-c lock_timeout={LOCK_WAIT_S * 1000}"
    if read_only:
        options += " -c default_transaction_read_only=on"
    return {"options": options}


def connect(target):
    """An Engine for `target` to write into, with its schema brought to
    schema.VERSION, and a line saying what that changed (None: nothing)."""
    url = _url(target)
    sqlite_db = url.get_backend_name() == "sqlite"
    engine = _engine(target, url, connect_args={"timeout": LOCK_WAIT_S}
                     if sqlite_db else _postgres_args())
    if sqlite_db:
        _sqlite_serialised(engine)
    with _errors(target):
        with engine.begin() as connection:
            before = migrate(connection)
    return engine, _migrated_line(before)


def _migrated_line(before):
    """What connect changed, said: an older schema migrated (a new
    database made is what the user asked for)."""
    if before in (0, schema.VERSION):
        return None
    return (f"database: schema migrated from version {before} to "
            f"{schema.VERSION}")


def open_to_read(target):
    """An Engine that only reads `target`: an existing SQLite file opened
    read-only, PostgreSQL in read-only transactions. Nothing is created or
    migrated (read_cells reads an older schema as it is)."""
    url = _url(target)
    if url.get_backend_name() != "sqlite":
        return _engine(target, url,
                       connect_args=_postgres_args(read_only=True))
    path = Path(url.database)
    if not path.is_file():
        raise UserError(f"no results database at {path}: make one with "
                        "`invoke export --db`")
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    return _engine(target, "sqlite://", creator=lambda: sqlite3.connect(
        uri, uri=True, timeout=LOCK_WAIT_S))


class _errors:
    """SQLAlchemy's errors as one line naming the database."""

    def __init__(self, target):
        self.target = target

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, _tb):
        if isinstance(exc, json.JSONDecodeError):
            # A JSON column (process_means_s, phase_times) that another
            # program or a hand left unreadable.
            raise UserError(f"database {safe_url(self.target)}: a stored "
                            f"JSON value is damaged ({exc})") from exc
        if isinstance(exc, SQLAlchemyError):
            detail = str(getattr(exc, "orig", None) or exc).strip()
            if _locked(exc):
                detail = (f"another session held it locked for "
                          f"{LOCK_WAIT_S} s; gave up, nothing written "
                          "(run again when it is free)")
            raise UserError(f"database {safe_url(self.target)}: "
                            f"{detail.splitlines()[0]}") from exc
        return False


def _locked(exc):
    """Whether `exc` is a lock wait that ran out (SQLite's busy timeout,
    PostgreSQL's lock_timeout)."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.OperationalError):
        return "database is locked" in str(orig)
    return getattr(orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE


def safe_url(target):
    """The URL without its password, for messages."""
    try:
        return make_url(url_of(target)).render_as_string(hide_password=True)
    except ArgumentError:
        return target


def schema_version(connection):
    if not inspect(connection).has_table("dlrepro_schema"):
        return 0
    return connection.execute(text("SELECT max(version) FROM "
                                   "dlrepro_schema")).scalar() or 0


def checked_version(connection):
    """The schema version of a dlrepro results database; refuses a newer
    one."""
    version = schema_version(connection)
    if isinstance(version, bool) or not isinstance(version, int):
        raise UserError(f"the database's schema version is {version!r}, "
                        f"not a number: it is damaged")
    if version > schema.VERSION:
        raise UserError(f"the database has schema version {version}; this "
                        f"dlrepro knows up to {schema.VERSION}: update it")
    return version


def migrate(connection):
    """Bring the schema to schema.VERSION; refuse a newer one and a
    database whose tables of our names are another program's. Returns the
    version it had."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                           {"k": _MIGRATION_LOCK})
    version = checked_version(connection)
    if version == 0:
        _refuse_foreign(connection)
    for step in schema.MIGRATIONS[version:]:
        step(connection)
    if version < schema.VERSION:
        connection.execute(text("UPDATE dlrepro_schema SET version = :v"),
                           {"v": schema.VERSION})
    return version


def _refuse_foreign(connection):
    """A database without dlrepro_schema whose `cells` or `runs` are
    another program's (a --sqlite export's flat table, say): writing our
    rows there would mix the two."""
    taken = [name for name in ("cells", "runs")
             if inspect(connection).has_table(name)]
    if taken:
        where = connection.engine.url.render_as_string(hide_password=True)
        raise UserError(
            f"{where} is not a dlrepro results database: it has table(s) "
            f"{', '.join(taken)} but no dlrepro_schema (another program's, "
            "or a flat `--sqlite` export); give --db a new database")


def _not_ours(connection):
    """The reason a database without dlrepro_schema is not read."""
    flat = inspect(connection).has_table("cells")
    return ("not a dlrepro results database (no table dlrepro_schema"
            + ("; a flat `--sqlite` export is read by other tools, not by "
               "`invoke history`" if flat else "")
            + "): make one with `invoke export --db`")


# --- run folders -> rows ----------------------------------------------------

def _first_result(job_results):
    return next((r for _e, r in job_results if r is not None), None)


def _gpu_names(env):
    return ", ".join(g.get("name") or "?" for g in env.get("gpus") or []) \
        or None


def machine_name(record, job_results):
    """The default name of the machine that ran a run: its host name with
    its CPU count and model, since host names alone collide (every cloud
    VM here is "vm")."""
    host = record.get("host") or {}
    env = (_first_result(job_results) or {}).get("environment") or {}
    facts = [f"{host['cpus']} CPUs" if host.get("cpus") else None,
             env.get("cpu_model")]
    facts = ", ".join(f for f in facts if f)
    name = host.get("hostname") or env.get("host") or "unknown"
    return f"{name} ({facts})" if facts else name


def _suite_name(suite):
    return suite.get("name") if isinstance(suite, dict) else suite


def run_row(record, job_results, machine, exported_at):
    env = (_first_result(job_results) or {}).get("environment") or {}
    host = record.get("host") or {}
    command = record.get("command")
    return {"machine": machine, "run_id": record["run_id"],
            "kind": record["kind"], "suite": _suite_name(record.get("suite")),
            "status": record.get("status"),
            "command": " ".join(command) if isinstance(command, list)
            else command,
            "runtime": record.get("runtime"),
            "executor": record.get("executor"),
            "hostname": host.get("hostname"), "cpus": host.get("cpus"),
            "cpu_model": env.get("cpu_model"), "gpu": _gpu_names(env),
            "driver": next((g.get("driver") for g in env.get("gpus") or []
                            if g.get("driver")), None),
            # Runs do not record the dlrepro commit yet.
            "dlrepro_commit": record.get("dlrepro_commit"),
            "started_at": record.get("started_at"),
            "finished_at": record.get("finished_at"),
            "exported_at": exported_at}


def cell_key(cell):
    """The canonical text of a cell's identity: equal keys, same cell."""
    return json.dumps({k: cell.get(k) for k in CELL_FIELDS}, sort_keys=True)


def _stats(ok):
    if not ok:
        return {}
    stats = aggregate.cell_stats(ok[0]["cell"], ok)
    return dict(stat_columns(stats),
                process_means_s=stats.process_means)


def _provenance(result):
    env = (result or {}).get("environment") or {}
    container = env.get("container") or {}
    return {k: env.get(k) for k in ("framework_version", "python_version",
                                    "cuda", "cudnn", "harness_version",
                                    "harness_digest")} | {
        "image": container.get("image"),
        "image_digest": container.get("digest"),
        "started_at": (result or {}).get("started_at"),
        "finished_at": (result or {}).get("finished_at")}


def cell_rows(record, job_results, machine):
    """One row per cell of a bench run that has finished (every job of the
    cell ended); a cell still pending or running is left for later."""
    out = []
    columns = schema.tables()["cells"].c
    for spec, members in aggregate.cells(job_results):
        if any(e["status"] in ("pending", "running") for e, _r in members):
            continue
        first, cell, started = cell_row(record, spec, members)
        row = {name: None for name in columns.keys()}
        row.update(started, machine=machine, cell_key=cell_key(cell),
                   **{k: _scalar(cell.get(k)) for k in CELL_FIELDS})
        row.update(_stats(aggregate.ok_results(members)))
        row.update(_provenance(first))
        out.append(row)
    return out


def _scalar(value):
    return value if value is None or isinstance(value, (int, float, str)) \
        else json.dumps(value, sort_keys=True)


# --- rows -> the database ---------------------------------------------------

def _insert(connection, table):
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(
        connection.dialect.name)
    if dialect is None:
        raise UserError(f"the results database runs on SQLite or "
                        f"PostgreSQL, not {connection.dialect.name}")
    return dialect.insert(table)


def _where_key(table, row):
    return [column == row[column.name] for column in table.primary_key]


def _same(stored, row, ignore):
    return all(stored[k] == v for k, v in row.items() if k not in ignore)


def put(connection, table, row, ignore=()):
    """Write one row by its primary key: 'new', 'updated' or 'unchanged'.
    A concurrent writer of the same key is not an error: its row counts
    as there (then compared)."""
    keys = [c.name for c in table.primary_key]
    inserted = connection.execute(
        _insert(connection, table).values(row)
        .on_conflict_do_nothing(index_elements=keys)
        .returning(*table.primary_key)).first()
    if inserted is not None:
        return "new"
    stored = connection.execute(select(table).where(
        *_where_key(table, row))).mappings().one()
    if _same(stored, row, ignore):
        return "unchanged"
    connection.execute(table.update().where(*_where_key(table, row)).values(
        {k: v for k, v in row.items() if k not in ignore}))
    return "updated"


def _is_time(value):
    return not isinstance(value, bool) and isinstance(value, (int, float)) \
        and value > 0


def _checked(row, target):
    """`row` if the history's arithmetic (logs and ratios of the times, the
    cell's identity) can take it; UserError naming it otherwise."""
    where = (f"database {safe_url(target)}: cell {row['cell_id']!r} of run "
             f"{row['run_id']!r}")
    try:
        key = json.loads(row["cell_key"])
    except (TypeError, ValueError):
        key = None
    if not isinstance(key, dict):
        raise UserError(f"{where}: its cell_key is not a JSON object (a "
                        f"damaged row)")
    means = row["process_means_s"]
    if not (row["mean_s"] is None or _is_time(row["mean_s"])) or not (
            means is None or isinstance(means, list) and all(
                _is_time(m) for m in means)):
        raise UserError(f"{where}: its mean_s {row['mean_s']!r} or "
                        f"process_means_s {means!r} is not times above 0 (a "
                        f"damaged row)")
    return row


def check_machine(name):
    """--machine as a name that prints on one line and fits its column."""
    if name is None:
        return None
    if not name.strip() or not name.isprintable():
        raise UserError(f"--machine must be printable text on one line "
                        f"(no control characters), got {name!r}")
    limit = schema.tables()["runs"].c.machine.type.length
    if len(name) > limit:
        raise UserError(f"--machine is at most {limit} characters, got "
                        f"{len(name)}")
    return name


def _not_begun(job_results):
    """A run with no result yet while its jobs still run: the machine it
    ran on cannot be named yet (machine_name reads the first result)."""
    return _first_result(job_results) is None and any(
        e["status"] in ("pending", "running") for e, _r in job_results)


def export(engine, runs, machine=None, target=""):
    """Write [(record, job_results)] of bench runs; returns {'new': n,
    'updated': n, 'unchanged': n} over their cells, 'other_runs', the
    runs left out (convergence runs have no cells), and 'not_begun', the
    runs left for later (no result yet: _not_begun)."""
    machine = check_machine(machine)
    tables = schema.tables()
    now = utc_now()
    counts = {"new": 0, "updated": 0, "unchanged": 0, "other_runs": 0,
              "not_begun": 0}
    with _errors(target), engine.begin() as connection:
        for record, job_results in runs:
            if runrecord.kind_of(record) is not KINDS["bench"]:
                counts["other_runs"] += 1
                continue
            if machine is None and _not_begun(job_results):
                counts["not_begun"] += 1
                continue
            label = machine or machine_name(record, job_results)
            put(connection, tables["runs"],
                run_row(record, job_results, label, now),
                ignore=("exported_at",))
            for row in cell_rows(record, job_results, label):
                counts[put(connection, tables["cells"], row)] += 1
    return counts


def read_cells(engine, target=""):
    """Every cell row joined with its run's machine facts, as dicts,
    ordered by machine, cell and date. A database of an older schema is
    read as it is: the columns it lacks are None."""
    with _errors(target), engine.connect() as connection:
        version = checked_version(connection)
        if version == 0:
            raise UserError(f"database {safe_url(target)}: "
                            f"{_not_ours(connection)}")
        tables = schema.tables(version)
        cells, runs = tables["cells"], tables["runs"]
        extra = [runs.c[k].label(f"run_{k}") for k in (
            "hostname", "cpu_model", "gpu", "driver", "suite", "started_at",
            "dlrepro_commit", "runtime")]
        same_run = ((runs.c.machine == cells.c.machine)
                    & (runs.c.run_id == cells.c.run_id))
        query = select(cells, *extra).join(runs, same_run)
        rows = [dict(r) for r in connection.execute(query).mappings()]
    missing = dict.fromkeys(schema.tables()["cells"].c.keys())
    rows = [_checked(missing | row, target) for row in rows]
    return sorted(rows, key=lambda r: (r["machine"], r["cell_key"],
                                       r["run_started_at"] or "",
                                       r["run_id"]))
