"""Running a CLI command's coroutine against Kafka and PostgreSQL, saying plainly when either is
out of reach: one red line naming the server, its address and what to try, exit status 1, no
traceback (a user who typed ``tessera submit`` with Kafka down should read "Kafka is not
running", not an aiokafka stack)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import typer
from rich.console import Console

T = TypeVar("T")


def where_postgres(url: str) -> str:
    """``host:port/database`` of a database URL (never its password)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 5432}{parts.path}"


def run_reaching(coro: Coroutine[Any, Any, T], doing: str, console: Console) -> T:
    """``asyncio.run(coro)``; Kafka or PostgreSQL out of reach ends the command with a clear line."""
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    from shared.eventstore import StoreUnavailableError
    from shared.settings import Settings

    try:
        settings = Settings()
    except Exception:
        coro.close()  # never run: no "was never awaited" warning after the settings' error
        raise
    try:
        return asyncio.run(coro)
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        server = f"Kafka at {settings.kafka_bootstrap_servers}"
        reason = str(exc)
    except StoreUnavailableError as exc:  # the event store's adapter says PostgreSQL is away
        server = f"PostgreSQL at {where_postgres(settings.database_url)}"
        reason = str(exc)
    console.print(
        f"[red]{doing}: cannot reach {server} ({reason}).  Is it running?  `tessera infra status` "
        "says; `tessera infra up` starts the project's own.  Nothing was changed.[/red]"
    )
    raise typer.Exit(1)
