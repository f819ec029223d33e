"""The results database: run folders in, rows out, through SQLAlchemy Core.

A URL names it: `sqlite:///results/history.db` (or just a path: SQLite is
the default, one embedded file) or `postgresql://user:pass@host/db` for a
team (driven by psycopg 3). Every finished cell of a run becomes one row
keyed by (machine, run, cell); re-exporting a run changes nothing (a row
is written only when new or different), and machines exporting into one
database merge, since a machine's rows never share its key with another's.
The machine is the host name the run recorded with its CPU count and model
(machine_name) unless the exporter names it.
"""
import json
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
from dlrepro.run import store
from dlrepro.run.kinds import KINDS

# Any fixed number: the advisory lock that serialises migrations on
# PostgreSQL (every dlrepro exporter asks for the same one).
_MIGRATION_LOCK = 1608072490


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


def connect(target):
    """An Engine for `target` with its schema at schema.VERSION."""
    try:
        url = make_url(url_of(target))
    except ArgumentError as exc:
        raise UserError(f"not a database URL: {target} ({exc})")
    if url.get_backend_name() == "sqlite" and url.database:
        folder = Path(url.database).parent
        if not folder.is_dir():
            raise UserError(f"cannot open {url.database}: no folder {folder}")
    try:
        engine = create_engine(
            url, connect_args={"timeout": 60}
            if url.get_backend_name() == "sqlite" else {})
    except (NoSuchModuleError, ArgumentError) as exc:
        raise UserError(f"cannot use database {target}: {exc}")
    if engine.dialect.name == "sqlite":
        _sqlite_serialised(engine)
    with _errors(target):
        with engine.begin() as connection:
            migrate(connection)
    return engine


class _errors:
    """SQLAlchemy's errors as one line naming the database."""

    def __init__(self, target):
        self.target = target

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, _tb):
        if isinstance(exc, SQLAlchemyError):
            detail = str(getattr(exc, "orig", None) or exc).strip()
            raise UserError(f"database {safe_url(self.target)}: "
                            f"{detail.splitlines()[0]}") from exc
        return False


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


def migrate(connection):
    """Bring the schema to schema.VERSION; refuse a newer one."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                           {"k": _MIGRATION_LOCK})
    version = schema_version(connection)
    if version > schema.VERSION:
        raise UserError(f"the database has schema version {version}; this "
                        f"dlrepro knows up to {schema.VERSION}: update it")
    for step in schema.MIGRATIONS[version:]:
        step(connection)
    if version < schema.VERSION:
        connection.execute(text("UPDATE dlrepro_schema SET version = :v"),
                           {"v": schema.VERSION})


# --- run folders -> rows ----------------------------------------------------

def _first_result(pairs):
    return next((r for _e, r in pairs if r is not None), None)


def _gpu_names(env):
    return ", ".join(g.get("name") or "?" for g in env.get("gpus") or []) \
        or None


def machine_name(record, pairs):
    """The default name of the machine that ran a run: its host name with
    its CPU count and model, since host names alone collide (every cloud
    VM here is "vm")."""
    host = record.get("host") or {}
    env = (_first_result(pairs) or {}).get("environment") or {}
    facts = [f"{host['cpus']} CPUs" if host.get("cpus") else None,
             env.get("cpu_model")]
    facts = ", ".join(f for f in facts if f)
    name = host.get("hostname") or env.get("host") or "unknown"
    return f"{name} ({facts})" if facts else name


def _suite_name(suite):
    return suite.get("name") if isinstance(suite, dict) else suite


def run_row(record, pairs, machine, exported_at):
    env = (_first_result(pairs) or {}).get("environment") or {}
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


def cell_rows(record, pairs, machine):
    """One row per cell of a bench run that has finished (every job of the
    cell ended); a cell still pending or running is left for later."""
    out = []
    columns = schema.tables()["cells"].c
    for spec, members in aggregate.cells(pairs):
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


def export(engine, runs, machine=None, target=""):
    """Write [(record, pairs)] of bench runs; returns {'new': n,
    'updated': n, 'unchanged': n} over their cells and 'other_runs', the
    runs left out (convergence runs have no cells)."""
    tables = schema.tables()
    now = utc_now()
    counts = {"new": 0, "updated": 0, "unchanged": 0, "other_runs": 0}
    with _errors(target), engine.begin() as connection:
        for record, pairs in runs:
            if store.kind_of(record) is not KINDS["bench"]:
                counts["other_runs"] += 1
                continue
            label = machine or machine_name(record, pairs)
            put(connection, tables["runs"],
                run_row(record, pairs, label, now), ignore=("exported_at",))
            for row in cell_rows(record, pairs, label):
                counts[put(connection, tables["cells"], row)] += 1
    return counts


def read_cells(engine, target=""):
    """Every cell row joined with its run's machine facts, as dicts,
    ordered by machine, cell and date."""
    cells, runs = schema.tables()["cells"], schema.tables()["runs"]
    extra = [runs.c[k].label(f"run_{k}") for k in (
        "hostname", "cpu_model", "gpu", "driver", "suite", "started_at",
        "dlrepro_commit", "runtime")]
    same_run = ((runs.c.machine == cells.c.machine)
                & (runs.c.run_id == cells.c.run_id))
    query = select(cells, *extra).join(runs, same_run)
    with _errors(target), engine.connect() as connection:
        rows = [dict(r) for r in connection.execute(query).mappings()]
    return sorted(rows, key=lambda r: (r["machine"], r["cell_key"],
                                       r["run_started_at"] or "",
                                       r["run_id"]))
