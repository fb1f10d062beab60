#!/usr/bin/env bash
# Stops Kafka and PostgreSQL started by infra/up.sh.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/kafka.sh" down
"$HERE/postgres.sh" down
