#!/usr/bin/env bash
# Makes sure a PostgreSQL server is there for the results-database tests
# (tests/results/test_history.py): Debian's postgresql package when missing, its
# own cluster "dlrepro" on port 5439 (so a system cluster on 5432 is left as
# it is), started, with a role and a database the tests may create databases
# from. Idempotent. The tests read the URL from DLREPRO_POSTGRES_URL, whose
# default is the one printed here.
set -euo pipefail
port=${DLREPRO_POSTGRES_PORT:-5439}
cluster=dlrepro
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
started=$(date +%s)
if ! command -v pg_createcluster >/dev/null; then
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends postgresql >/dev/null
fi
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$cluster"; then
    # Debian's default pg_hba.conf asks local TCP clients for a password
    # (scram-sha-256), which is what the tests' URL gives.
    $sudo pg_createcluster "$version" "$cluster" -p "$port" >/dev/null
fi
if ! pg_lsclusters -h | awk -v c="$cluster" '$2 == c {print $4}' | grep -qx online; then
    $sudo pg_ctlcluster "$version" "$cluster" start
fi
as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else $sudo runuser -u postgres -- "$@"; fi
}
psql_admin() {
    as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$port" -d postgres "$@"
}
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'dlrepro'")" != 1 ]; then
    psql_admin -c "CREATE ROLE dlrepro LOGIN CREATEDB PASSWORD 'dlrepro'"
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'dlrepro'")" != 1 ]; then
    psql_admin -c "CREATE DATABASE dlrepro OWNER dlrepro"
fi
echo "postgres.sh: PostgreSQL $version cluster $cluster online in" \
     "$(( $(date +%s) - started )) s;" \
     "DLREPRO_POSTGRES_URL=postgresql+psycopg://dlrepro:dlrepro@127.0.0.1:$port/dlrepro"
