"""The results database's tables (SQLAlchemy Core) and their migrations.

The schema is versioned: table `dlrepro_schema` holds the version, and
MIGRATIONS[n] takes a database from version n to n + 1. Opening a database
applies the missing steps in one transaction, under a lock (PostgreSQL: an
advisory lock; SQLite: BEGIN IMMEDIATE), so two exporters starting at once
migrate it once. A step adds to the schema and never rewrites rows, so an
older dlrepro keeps reading what it knows.

Version 1: runs and cells. Version 2: cells.phase_times, a nullable JSON
place for per-phase times (data, forward, backward, update), which results
do not carry yet; it stays null until they do. Version 3: cells.isolation,
the mode the cell's processes ran under (cell, group, or "cell+group" when
they differ; null in rows exported before it).
"""
from sqlalchemy import (JSON, Column, Float, Integer, MetaData, String,
                        Table, Text, text)

from harness.spec import CELL_FIELDS

VERSION = 3

# The identity fields' column types; every other cell field is text.
_INTEGER_FIELDS = {"batch_size", "global_batch_size", "gpus", "threads",
                   "iterations", "warmup", "seed"}


def _cell_field(name):
    return Column(name, Integer if name in _INTEGER_FIELDS else String(64))


def _tables(version):
    """The tables as they are at schema `version` (>= 1)."""
    metadata = MetaData()
    Table("dlrepro_schema", metadata, Column("version", Integer,
                                             nullable=False))
    Table("runs", metadata,
          Column("machine", String(200), primary_key=True),
          Column("run_id", String(200), primary_key=True),
          Column("kind", String(32)), Column("suite", String(200)),
          Column("status", String(32)), Column("command", Text),
          Column("runtime", String(32)), Column("executor", String(32)),
          Column("hostname", String(200)), Column("cpus", Integer),
          Column("cpu_model", String(200)), Column("gpu", String(400)),
          Column("driver", String(64)),
          Column("dlrepro_commit", String(64)),
          Column("started_at", String(32)), Column("finished_at", String(32)),
          Column("exported_at", String(32)))
    columns = [
        Column("machine", String(200), primary_key=True),
        Column("run_id", String(200), primary_key=True),
        Column("cell_id", String(400), primary_key=True),
        # The whole identity as canonical JSON: equal text, same cell.
        Column("cell_key", Text, nullable=False, index=True),
        *(_cell_field(name) for name in CELL_FIELDS),
        Column("status", String(32)), Column("processes", Integer),
        Column("mean_s", Float), Column("ci95_low_s", Float),
        Column("ci95_high_s", Float), Column("ci_basis", String(32)),
        Column("between_sd_s", Float), Column("within_sd_s", Float),
        Column("samples_per_s", Float), Column("process_means_s", JSON),
        Column("framework_version", String(64)),
        Column("python_version", String(64)), Column("cuda", String(64)),
        Column("cudnn", String(64)), Column("image", String(400)),
        Column("image_digest", String(200)),
        Column("harness_version", String(32)),
        Column("harness_digest", String(64)),
        Column("started_at", String(32)), Column("finished_at", String(32)),
        Column("message", Text)]
    if version >= 2:
        columns.append(Column("phase_times", JSON, nullable=True))
    if version >= 3:
        columns.append(Column("isolation", String(32), nullable=True))
    Table("cells", metadata, *columns)
    return metadata


def tables(version=VERSION):
    """The tables as they are at `version` (default: current): {name:
    Table}."""
    return _tables(version).tables


def _create_v1(connection):
    old = _tables(1)
    old.create_all(connection)
    connection.execute(old.tables["dlrepro_schema"].insert(),
                       {"version": 1})


def _add_column(version, name):
    """The step that adds cells.`name` as it is at `version`."""
    def step(connection):
        kind = _tables(version).tables["cells"].c[name].type.compile(
            dialect=connection.dialect)
        connection.execute(text(f"ALTER TABLE cells ADD COLUMN {name} "
                                f"{kind}"))
    return step


# MIGRATIONS[n]: version n -> n + 1 (0: an empty database).
MIGRATIONS = [_create_v1, _add_column(2, "phase_times"),
              _add_column(3, "isolation")]
assert len(MIGRATIONS) == VERSION
