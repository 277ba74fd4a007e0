#!/usr/bin/env bash
# A throw-away local PostgreSQL for trying think on it, and for the tests (.ci/run uses it).
#
#   url=$(bench/pg_local.sh start /tmp/think-pg)    # prints postgresql://postgres@127.0.0.1:PORT/think
#   think serve --db "$url"
#   bench/pg_local.sh stop /tmp/think-pg            # stops the server and deletes the directory
#
# start DIR [DATABASE]: a new cluster in DIR (made if missing; must not hold one yet) listening
# on a free port of 127.0.0.1 only (its unix socket in DIR), trust authentication, and DATABASE
# (default: think) created. Durability is traded for speed (fsync off): for trying and testing,
# never for data you keep. Run as root, the server runs as the `postgres` user (initdb refuses
# root). Needs PostgreSQL's server binaries: on PATH or in /usr/lib/postgresql/*/bin
# (Debian/Ubuntu: apt-get install postgresql).
set -euo pipefail

die() { echo "pg_local: $*" >&2; exit 1; }

bindir() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"  # the real bin dir: createdb lives there too
    return
  fi
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$found" ] && [ -x "$found/initdb" ] || die "no PostgreSQL server binaries (initdb, pg_ctl): install postgresql"
  echo "$found"
}

# Run a PostgreSQL binary as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local dir=${1:?usage: pg_local.sh start DIR [DATABASE]} db=${2:-think} bin port
  bin=$(bindir)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ ! -e "$dir/data" ] || die "$dir already holds a cluster (pg_local.sh stop $dir first)"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user to run the server"
    chown postgres "$dir"
  fi
  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  port=$(free_port)
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    start >/dev/null || { cat "$dir/server.log" >&2; die "the server did not start"; }
  echo "$port" >"$dir/port"
  as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db"
  echo "postgresql://postgres@127.0.0.1:$port/$db"
}

stop() {
  local dir=${1:?usage: pg_local.sh stop DIR}
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) die "usage: pg_local.sh start DIR [DATABASE] | stop DIR" ;;
esac
