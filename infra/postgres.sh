#!/usr/bin/env bash
# PostgreSQL from Debian's packages, as a cluster of the project's own under .local/postgres on
# 127.0.0.1, with a `tessera` database.  Installs the packages when missing (apt-get, as root).
# Idempotent: `up` reuses an initialised cluster and a running server.
#   TESSERA_PG_PORT (default 15432)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="$ROOT/.local/postgres"
# PostgreSQL will not run as root, so as root the server runs as the package's `postgres` user,
# which may not be able to reach a checkout under /root.  Its files then live in a directory of
# its own (one per checkout) and .local/postgres links to them.
if [[ $(id -u) -eq 0 ]]; then
  SERVER_DIR="/var/lib/postgresql/tessera-$(printf '%s' "$ROOT" | md5sum | cut -c1-12)"
else
  SERVER_DIR="$HOME_DIR"
fi
DATA="$SERVER_DIR/data"
RUN="$SERVER_DIR/run"
LOG="$SERVER_DIR/postgres.log"
PORT="${TESSERA_PG_PORT:-15432}"
DB=tessera
USER_NAME=tessera

say() { echo "[postgres] $*"; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install() {
  if [[ -n "$(pg_bin)" && -x "$(pg_bin)/initdb" ]]; then return; fi
  say "installing PostgreSQL from Debian's packages"
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then command -v sudo >/dev/null && sudo="sudo" || { echo "[postgres] need root (or sudo) to apt-get install postgresql" >&2; exit 1; }; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq postgresql postgresql-contrib >/dev/null
  # The package may start a system cluster on 5432; ours runs apart from it.
}

# PostgreSQL refuses to run as root: as root, run it as the `postgres` user the package creates.
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

ready() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PORT" 2>/dev/null; }

up() {
  install
  local bin; bin="$(pg_bin)"
  mkdir -p "$HOME_DIR" "$SERVER_DIR" "$RUN"
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres:postgres "$SERVER_DIR" "$RUN"
    ln -sfn "$DATA" "$HOME_DIR/data"; ln -sfn "$LOG" "$HOME_DIR/postgres.log"
  fi
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    say "initialising a cluster in $DATA"
    as_owner "$bin/initdb" -D "$DATA" -U "$USER_NAME" --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$HOME_DIR/initdb.log" 2>&1 \
      || { cat "$HOME_DIR/initdb.log" >&2; exit 1; }
    cat >>"$DATA/postgresql.conf" <<CONF
# Tessera: loopback only, own socket dir, sized for a 2-core test machine.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$RUN'
max_connections = 200
shared_buffers = 256MB
synchronous_commit = on
fsync = on
CONF
  fi
  if ready; then say "already running on 127.0.0.1:$PORT"; else
    say "starting on 127.0.0.1:$PORT"
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null \
      || { tail -30 "$LOG" >&2; exit 1; }
  fi
  for _ in $(seq 1 60); do ready && break; sleep 0.5; done
  ready || { echo "[postgres] not ready; see $LOG" >&2; exit 1; }
  if ! "$bin/psql" -h 127.0.0.1 -p "$PORT" -U "$USER_NAME" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U "$USER_NAME" "$DB"
  fi
  say "ready: DATABASE_URL=postgresql://$USER_NAME@127.0.0.1:$PORT/$DB"
}

down() {
  local bin; bin="$(pg_bin)"
  if [[ -n "$bin" && -f "$DATA/PG_VERSION" ]] && ready; then
    say "stopping"
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
  else
    say "not running"
  fi
}

status() { if [[ -n "$(pg_bin)" ]] && ready; then say "running on 127.0.0.1:$PORT"; else say "stopped"; return 3; fi; }

# `crash`: stop as a crash would (every server process quits at once, nothing is flushed or
# checkpointed; the next `up` runs crash recovery from the write-ahead log).  For the outage tests.
crash() {
  if ready; then
    say "crashing the server (immediate stop)"
    as_owner "$(pg_bin)/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
  else
    say "not running"
  fi
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  status) status ;;
  reset) down; rm -rf "$DATA"; say "cluster removed" ;;
  crash) crash ;;
  *) echo "usage: $0 up|down|status|reset|crash" >&2; exit 2 ;;
esac
