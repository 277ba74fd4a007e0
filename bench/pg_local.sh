#!/usr/bin/env bash
# A throw-away PostgreSQL for trying think on several servers, and for the tests:
#   eval "$(bash bench/pg_local.sh start)"   # prints: export THINK_TEST_POSTGRES_URL=postgresql://...
#   bash bench/pg_local.sh stop DIR
# Uses the server binaries of the Debian/Ubuntu package `postgresql` (installed if missing, as
# root). The cluster lives in a temporary directory, listens on 127.0.0.1 only, and trusts local
# connections: it is for trying and testing, never for production data.
set -euo pipefail

find_bin() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$found" ]; then echo "$found"; return; fi
  if command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"; return
  fi
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
    ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1
  else
    echo "pg_local: no PostgreSQL server binaries (install the package 'postgresql')" >&2
    exit 1
  fi
}

as_owner() {
  # initdb and postgres refuse to run as root: run them as the `postgres` user then.
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-start}" in
  start)
    bin=$(find_bin)
    dir=$(mktemp -d -t think-pg-XXXXXX)
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # TCP connections must give the password (scram-sha-256), as a real server's do: the tests
    # then see what a password-checking server does. The socket in $dir stays trusted.
    password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    echo "$password" > "$dir/pwfile"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir/pwfile"; fi
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      --pwfile="$dir/pwfile" >/dev/null
    echo "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off" > "$dir/options"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "$(cat "$dir/options")" start >/dev/null
    PGPASSWORD="$password" as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE think_test" >/dev/null
    echo "export THINK_TEST_POSTGRES_URL=postgresql://postgres:$password@127.0.0.1:$port/think_test"
    echo "export THINK_PG_DIR=$dir"
    ;;
  stop)
    dir=${2:-${THINK_PG_DIR:?pg_local stop DIR}}
    bin=$(find_bin)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null || true
    rm -rf "$dir"
    ;;
  restart | pause | resume)
    # The server of a running cluster, for tests of a database that restarts or goes away:
    # restart (fast shutdown, then up again), pause (stopped, files kept), resume (started again).
    dir=${2:?pg_local $1 DIR}
    bin=$(find_bin)
    case "$1" in
      restart) as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w restart >/dev/null ;;
      pause) as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null ;;
      resume) as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "$(cat "$dir/options")" start >/dev/null ;;
    esac
    ;;
  *)
    echo "usage: pg_local.sh start | stop DIR | restart DIR | pause DIR | resume DIR" >&2; exit 2
    ;;
esac
