#!/usr/bin/env bash
# Brings up PostgreSQL and Kafka (idempotent) and prints their addresses.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/postgres.sh" up
"$HERE/kafka.sh" up
