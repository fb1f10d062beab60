"""A store that is away (PostgreSQL restarting or crashed) says so in the port's terms, and
callers that hold accepted work wait for it instead of dropping the work or exiting."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from shared.eventstore import NewEvent, StoreUnavailableError
from shared.eventstore.postgres import PostgresEventStore
from shared.eventstore.retry import until_available


class _AwayPool:
    """A pool whose connections fail as PostgreSQL's do while it restarts."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        raise self.error
        yield  # pragma: no cover - makes this an async generator


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    ],
)
async def test_postgresql_connection_failures_come_out_as_store_unavailable(error: BaseException) -> None:
    store = PostgresEventStore(_AwayPool(error), "postgresql://unused")
    with pytest.raises(StoreUnavailableError) as raised:
        await store.append([NewEvent("job-a", "JobAdmitted", {})], {"job-a": 0})
    assert raised.value.__cause__ is error
    assert isinstance(raised.value, OSError)  # code that rides out network faults rides this out
    with pytest.raises(StoreUnavailableError):
        await store.read_stream("job-a")


async def test_other_database_errors_are_not_taken_for_an_outage() -> None:
    store = PostgresEventStore(_AwayPool(asyncpg.UndefinedTableError("no such table")), "postgresql://x")
    with pytest.raises(asyncpg.UndefinedTableError):
        await store.read_stream("job-a")


async def test_until_available_retries_while_the_store_is_away_and_passes_other_errors_on() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise StoreUnavailableError("starting up")
        return "written"

    assert await until_available(flaky, "test") == "written" and calls == 3

    async def broken() -> str:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        await until_available(broken, "test")
