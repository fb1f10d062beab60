"""Where the real Kafka and PostgreSQL for integration tests come from, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` / ``DATABASE_URL`` when set;
2. testcontainers' Kafka and PostgreSQL containers when a Docker *engine* answers (a client binary
   without an engine does not count);
3. the project's own servers, started (idempotently) by ``infra/kafka.sh`` and ``infra/postgres.sh``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def docker_engine_answers() -> bool:
    try:
        import docker

        return bool(docker.from_env(timeout=3).ping())
    except Exception:
        return False


def _infra(script: str) -> None:
    subprocess.run([str(ROOT / "infra" / script), "up"], check=True)


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    elif docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("confluentinc/cp-kafka:7.6.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        _infra("kafka.sh")
        yield f"127.0.0.1:{os.environ.get('TESSERA_KAFKA_PORT', '19092')}"


@contextmanager
def database_url() -> Iterator[str]:
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
    elif docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine") as pg:
            yield pg.get_connection_url().replace("postgresql+psycopg2://", "postgresql://")
    else:
        _infra("postgres.sh")
        yield f"postgresql://tessera@127.0.0.1:{os.environ.get('TESSERA_PG_PORT', '15432')}/tessera"


def own_servers() -> bool:
    """Whether the tests run on the project's own native servers (``infra/``), the only ones a
    test may stop and start again: servers named by the environment belong to someone else, and
    testcontainers' are not restarted in place."""
    return (
        not os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        and not os.environ.get("DATABASE_URL")
        and (not docker_engine_answers())
    )


def crash(server: str) -> None:
    """Crash one of the project's own servers: ``kafka`` is killed (SIGKILL), ``postgres`` stops
    immediately (every process at once, nothing checkpointed), as ``infra/<server>.sh crash``."""
    subprocess.run([str(ROOT / "infra" / f"{server}.sh"), "crash"], check=True)


def restart(server: str) -> None:
    """Start a crashed server again on the same data (``infra/<server>.sh up``: Kafka recovers
    its logs, PostgreSQL replays its write-ahead log); returns once it answers."""
    subprocess.run([str(ROOT / "infra" / f"{server}.sh"), "up"], check=True)
