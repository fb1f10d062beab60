"""A store that is away (PostgreSQL restarting or crashed) says so in the port's terms, and
callers that hold accepted work wait for it instead of dropping the work or exiting."""

from __future__ import annotations

import asyncio
import contextlib
import time
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


async def test_until_available_gives_up_promptly_once_told_to_stop() -> None:
    stop = asyncio.Event()
    calls = 0

    async def away() -> str:
        nonlocal calls
        calls += 1
        if calls == 4:
            stop.set()  # the service is shutting down while the store is still away
        raise StoreUnavailableError("starting up")

    began = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        await until_available(away, "test", stop=stop)
    # Three waits of 0.2, 0.4 and 0.8 s, then no fourth: the stop ends the retries.
    assert calls == 4 and time.monotonic() - began < 3.0


async def test_until_available_counts_only_the_named_errors_as_the_store_away() -> None:
    async def process_failed() -> str:
        raise FileNotFoundError("no such command")  # an OSError, but not the store

    with pytest.raises(FileNotFoundError):
        await until_available(process_failed, "test", errors=StoreUnavailableError)


async def test_a_service_starting_before_its_database_waits_for_it_then_gives_up() -> None:
    """``wait_s``: connection refused is waited out (a service may start before PostgreSQL), but
    only that long: a wrong address ends in the port's error, not in a service waiting for ever."""
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        await PostgresEventStore.connect("postgresql://tessera@127.0.0.1:1/tessera", wait_s=1.0)
    waited = time.monotonic() - began
    assert 1.0 <= waited < 10.0
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError):  # no wait asked: at once
        await PostgresEventStore.connect("postgresql://tessera@127.0.0.1:1/tessera")
    assert time.monotonic() - began < 1.0
