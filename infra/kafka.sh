#!/usr/bin/env bash
# Apache Kafka (KRaft, one combined broker+controller) on 127.0.0.1, run from Maven Central jars
# on the machine's Java 17.  Idempotent: `up` reuses the jars, the formatted storage and a running
# broker; `down` stops it; `status` says whether it answers.
#   TESSERA_KAFKA_PORT (default 19092), TESSERA_KAFKA_CONTROLLER_PORT (default 19093)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="$ROOT/.local/kafka"
LIBS="$HOME_DIR/libs"
DATA="$HOME_DIR/data"
LOGS="$HOME_DIR/logs"
PIDFILE="$HOME_DIR/kafka.pid"
PORT="${TESSERA_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${TESSERA_KAFKA_CONTROLLER_PORT:-19093}"
VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$ROOT/infra/kafka/pom.xml")"

say() { echo "[kafka] $*"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

fetch_jars() {
  if [[ -f "$LIBS/kafka_2.13-$VERSION.jar" && -f "$LIBS/.complete" ]]; then return; fi
  command -v mvn >/dev/null || { echo "[kafka] Maven (mvn) is needed to fetch the broker jars" >&2; exit 1; }
  say "fetching Apache Kafka $VERSION and its runtime dependencies from Maven Central"
  rm -rf "$LIBS"; mkdir -p "$LIBS"
  mvn -q -B -f "$ROOT/infra/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$LIBS" -DincludeScope=runtime >"$HOME_DIR/mvn.log" 2>&1 \
    || { cat "$HOME_DIR/mvn.log" >&2; exit 1; }
  touch "$LIBS/.complete"
}

configure() {
  mkdir -p "$DATA" "$LOGS"
  sed -e "s#@DATA@#$DATA#" -e "s#@PORT@#$PORT#" -e "s#@CONTROLLER_PORT@#$CONTROLLER_PORT#" \
      "$ROOT/infra/kafka/server.properties.in" >"$HOME_DIR/server.properties"
}

JAVA_ARGS=(-Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
           -Dkafka.logs.dir="$LOGS" -Dlog4j2.configurationFile="$ROOT/infra/kafka/log4j2.properties"
           -cp "$LIBS/*")

java_cmd() { java "${JAVA_ARGS[@]}" "$@"; }

format_storage() {
  if [[ -f "$DATA/meta.properties" ]]; then return; fi
  local id
  id="$(java_cmd kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
  say "formatting storage (cluster id $id)"
  java_cmd kafka.tools.StorageTool format -t "$id" -c "$HOME_DIR/server.properties" >"$LOGS/format.log" 2>&1 \
    || { cat "$LOGS/format.log" >&2; exit 1; }
}

wait_ready() {
  for _ in $(seq 1 120); do
    if port_open "$PORT" && grep -q "Kafka Server started" "$LOGS/server.log" 2>/dev/null; then return 0; fi
    if ! running; then echo "[kafka] broker exited; see $LOGS/server.log and $LOGS/stdout.log" >&2; tail -20 "$LOGS/stdout.log" >&2 || true; exit 1; fi
    sleep 0.5
  done
  echo "[kafka] broker did not become ready in 60 s; see $LOGS/server.log" >&2
  exit 1
}

up() {
  mkdir -p "$HOME_DIR"
  if running && port_open "$PORT"; then say "already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"; return; fi
  if port_open "$PORT"; then echo "[kafka] port $PORT is taken by another process" >&2; exit 1; fi
  command -v java >/dev/null || { echo "[kafka] Java 17+ is needed" >&2; exit 1; }
  fetch_jars
  configure
  format_storage
  : >"$LOGS/server.log"
  say "starting broker $VERSION on 127.0.0.1:$PORT"
  nohup java "${JAVA_ARGS[@]}" kafka.Kafka "$HOME_DIR/server.properties" >"$LOGS/stdout.log" 2>&1 &
  echo $! >"$PIDFILE"
  wait_ready
  say "ready: KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$PORT"
}

down() {
  if running; then
    local pid; pid="$(cat "$PIDFILE")"
    say "stopping broker (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  else
    say "not running"
  fi
  rm -f "$PIDFILE"
}

status() {
  if running && port_open "$PORT"; then say "running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"; else say "stopped"; return 3; fi
}

# `crash`: kill the broker as a crash would (SIGKILL: no controlled shutdown, no flush; the next
# `up` recovers its logs).  For the outage tests.
crash() {
  if running; then
    local pid; pid="$(cat "$PIDFILE")"
    say "crashing the broker (SIGKILL, pid $pid)"
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  else
    say "not running"
  fi
  rm -f "$PIDFILE"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  status) status ;;
  crash) crash ;;
  reset) down; rm -rf "$DATA" "$LOGS"; say "storage removed" ;;
  *) echo "usage: $0 up|down|status|reset|crash" >&2; exit 2 ;;
esac
