"""The PostgreSQL server the results-database tests export to
(.ci/postgres.sh starts it): a fresh database per test, or a skip (a
failure where DLREPRO_REQUIRE_POSTGRES is set)."""
import os
import random

import pytest
from sqlalchemy import create_engine, text

POSTGRES = os.environ.get(
    "DLREPRO_POSTGRES_URL",
    "postgresql://dlrepro:dlrepro@127.0.0.1:5439/dlrepro")


def engine(url):
    return create_engine(url.replace("postgresql://",
                                     "postgresql+psycopg://", 1))


@pytest.fixture
def postgres():
    """The URL of a fresh database on the test server."""
    try:
        admin = engine(POSTGRES).execution_options(
            isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 (any failure: no server)
        reason = (f"no PostgreSQL server at DLREPRO_POSTGRES_URL "
                  f"({str(exc).splitlines()[0]}); CI: .ci/postgres.sh")
        if os.environ.get("DLREPRO_REQUIRE_POSTGRES"):
            pytest.fail(f"DLREPRO_REQUIRE_POSTGRES is set but {reason}")
        pytest.skip(reason)
    name = f"dlrepro_test_{os.getpid()}_{random.randrange(1 << 30)}"
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    yield POSTGRES.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()
