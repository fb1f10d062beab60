"""PostgreSQL adapter of the event-store port (asyncpg).

Ordering: every append takes one transaction-scoped advisory lock before it draws positions, so
appends commit one at a time and positions become visible in increasing order.  A reader (the
relay) that has seen position p can therefore never later find a smaller one committing; reading
``position > cursor`` skips nothing.  PostgreSQL makes a commit visible before it releases the
transaction's locks, so the next appender cannot commit ahead of it.  The price is serialised
appends, a few hundred transactions a second; batching many events per append keeps throughput
(measured in ``loadtests/bench_eventstore.py``).  The rejected alternative, reading only below
``pg_snapshot_xmin``, lets appends run in parallel but publishes in transaction-id order, which
is not position order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg

from shared.eventstore.port import (
    NO_STREAM,
    ConcurrencyError,
    EventStore,
    NewEvent,
    RecordedEvent,
    StoreUnavailableError,
    check_named,
)
from shared.eventstore.retry import until_available

APPEND_LOCK = 0x7E55E7A  # advisory lock key serialising appends (taken in tessera_append)
CONFLICT_SQLSTATE = "TS409"  # raised by tessera_append when an expected version does not match
MIGRATION_LOCK = 0x7E55E7B
SNAPSHOT_LOCK = 0x7E55E7C  # one snapshot writer at a time (placement workers)
NOTIFY_CHANNEL = "tessera_events"


async def _init_connection(con: asyncpg.Connection) -> None:
    await con.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def migrate(con: asyncpg.Connection) -> list[str]:
    """Apply the SQL files in ``migrations/`` not yet applied, in name order.  Safe to race."""
    applied: list[str] = []
    async with con.transaction():
        await con.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await con.fetch("SELECT name FROM schema_migrations")}
        files = sorted(
            (f for f in resources.files("shared.eventstore.migrations").iterdir() if f.name.endswith(".sql")),
            key=lambda f: f.name,
        )
        for f in files:
            if f.name in done:
                continue
            await con.execute(f.read_text())
            await con.execute("INSERT INTO schema_migrations (name) VALUES ($1)", f.name)
            applied.append(f.name)
    return applied


def _record(row: asyncpg.Record) -> RecordedEvent:
    return RecordedEvent(
        position=row["position"],
        stream=row["stream"],
        version=row["version"],
        type=row["type"],
        data=row["data"],
        metadata=row["metadata"],
        recorded_at=row["recorded_at"],
    )


@dataclass(frozen=True, slots=True)
class Envelope:
    """A recorded event in its wire form for ``tessera.events``, with what the relay routes by.

    ``body`` is JSON ``{"position", "stream", "version", "type", "data", "metadata",
    "recorded_at"}`` (``recorded_at`` in ISO 8601, UTC), built by PostgreSQL from the stored row,
    so publishing an event costs the relay no JSON decoding or encoding at all.
    """

    position: int
    stream: str
    version: int
    type: str
    traceparent: str | None
    body: bytes


_ENVELOPES = """
SELECT position, stream, version, type, metadata->>'traceparent' AS traceparent,
       json_build_object(
           'position', position, 'stream', stream, 'version', version, 'type', type,
           'data', data, 'metadata', metadata,
           'recorded_at', to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
       )::text AS body
FROM events WHERE position > $1 ORDER BY position LIMIT $2
"""


TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.CannotConnectNowError,  # 57P03: starting up, shutting down, in recovery
    asyncpg.AdminShutdownError,  # 57P01: terminated by an administrator (a fast or immediate stop)
    asyncpg.CrashShutdownError,  # 57P02: terminated because another server process crashed
    asyncpg.ConnectionDoesNotExistError,  # the connection closed in the middle of the call
)
"""What a PostgreSQL restart or crash raises: the store is unavailable for now, not wrong."""


class PostgresEventStore(EventStore):
    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self.pool = pool
        self.dsn = dsn

    @classmethod
    async def connect(
        cls, dsn: str, min_size: int = 1, max_size: int = 10, wait_s: float = 0.0
    ) -> PostgresEventStore:
        """A pool on ``dsn``, migrated; a server that is not there (yet) is
        :class:`StoreUnavailableError`, as for every later call, after waiting up to ``wait_s``
        for it (a service may start before its database)."""
        if wait_s > 0:
            return await until_available(
                functools.partial(cls.connect, dsn, min_size, max_size), "connecting", within_s=wait_s
            )
        try:
            pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init_connection)
        except TRANSIENT as exc:
            raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc
        store = cls(pool, dsn)
        async with store._connection() as con:
            await migrate(con)
        return store

    async def close(self) -> None:
        await self.pool.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; PostgreSQL's connection failures (refused, reset, "the database
        system is starting up", shut down under the call) come out as :class:`StoreUnavailableError`."""
        try:
            async with self.pool.acquire() as con:
                yield con
        except TRANSIENT as exc:
            raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc

    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        check_named(expected, {e.stream for e in events})  # the versions are checked under the lock
        try:
            async with self._connection() as con:
                rows = await con.fetch(
                    "SELECT * FROM tessera_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    APPEND_LOCK,
                    [e.stream for e in events],
                    [e.type for e in events],
                    [json.dumps(dict(e.data)) for e in events],
                    [json.dumps(dict(e.metadata)) for e in events],
                    list(expected),
                    list(expected.values()),
                    tracking[0] if tracking is not None else None,
                    tracking[1] if tracking is not None else None,
                    NOTIFY_CHANNEL,
                )
        except asyncpg.PostgresError as exc:
            if getattr(exc, "sqlstate", None) != CONFLICT_SQLSTATE:
                raise
            raw = json.loads(getattr(exc, "detail", None) or "{}")
            raise ConcurrencyError({s: (int(e), int(a)) for s, (e, a) in raw.items()}) from None
        # Rows come back in position order, which is the order of ``events``; the bodies are the
        # caller's (decoding the JSONB again cost as much as the insert).
        return [
            RecordedEvent(
                position=r["out_position"],
                stream=r["out_stream"],
                version=r["out_version"],
                type=sent.type,
                data=dict(sent.data),
                metadata=dict(sent.metadata),
                recorded_at=r["out_recorded_at"],
            )
            for r, sent in zip(rows, events, strict=True)
        ]

    async def stream_version(self, stream: str) -> int:
        async with self._connection() as con:
            version = await con.fetchval("SELECT version FROM streams WHERE stream = $1", stream)
        return int(version) if version is not None else NO_STREAM

    async def read_stream(self, stream: str, after_version: int = 0) -> list[RecordedEvent]:
        async with self._connection() as con:
            rows = await con.fetch(
                "SELECT * FROM events WHERE stream = $1 AND version > $2 ORDER BY version",
                stream,
                after_version,
            )
        return [_record(r) for r in rows]

    async def read_streams(
        self, streams: Collection[str], up_to_version: int | None = None
    ) -> dict[str, list[RecordedEvent]]:
        async with self._connection() as con:
            rows = await con.fetch(
                "SELECT * FROM events WHERE stream = ANY($1::text[]) AND version <= $2"
                " ORDER BY stream, version",
                list(streams),
                up_to_version if up_to_version is not None else 2**31 - 1,
            )
        out: dict[str, list[RecordedEvent]] = {}
        for r in rows:
            out.setdefault(r["stream"], []).append(_record(r))
        return out

    async def read_all(
        self, after_position: int = 0, limit: int = 1000, types: Collection[str] | None = None
    ) -> list[RecordedEvent]:
        async with self._connection() as con:
            if types is None:
                rows = await con.fetch(
                    "SELECT * FROM events WHERE position > $1 ORDER BY position LIMIT $2",
                    after_position,
                    limit,
                )
            else:
                rows = await con.fetch(
                    "SELECT * FROM events WHERE position > $1 AND type = ANY($3::text[])"
                    " ORDER BY position LIMIT $2",
                    after_position,
                    limit,
                    list(types),
                )
        return [_record(r) for r in rows]

    async def read_envelopes(self, after_position: int = 0, limit: int = 1000) -> list[Envelope]:
        """Like :meth:`read_all`, in the relay's wire form (see :class:`Envelope`)."""
        async with self._connection() as con:
            rows = await con.fetch(_ENVELOPES, after_position, limit)
        return [
            Envelope(
                r["position"], r["stream"], r["version"], r["type"], r["traceparent"], r["body"].encode()
            )
            for r in rows
        ]

    async def last_position(self) -> int:
        async with self._connection() as con:
            value = await con.fetchval("SELECT coalesce(max(position), 0) FROM events")
        return int(value)

    async def save_snapshot(self, name: str, position: int, state: Mapping[str, Any]) -> None:
        # A snapshot is megabytes of JSON: encoded in a thread, so the caller's event loop (a
        # placement worker's) keeps turning meanwhile.  ``state`` must not change until this returns.
        body = await asyncio.to_thread(json.dumps, dict(state))
        async with self._connection() as con:
            await con.execute(
                """
                INSERT INTO snapshots (name, position, state) VALUES ($1, $2, $3::text::jsonb)
                ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, state = EXCLUDED.state,
                    taken_at = now()
                WHERE snapshots.position <= EXCLUDED.position
                """,
                name,
                position,
                body,
            )

    @contextlib.asynccontextmanager
    async def exclusive(self, key: int) -> AsyncIterator[bool]:
        """Try to take the session-level advisory lock ``key``; yields whether it was taken (so
        only one of several processes does a piece of work) and releases it afterwards."""
        async with self._connection() as con:
            taken = bool(await con.fetchval("SELECT pg_try_advisory_lock($1)", key))
            try:
                yield taken
            finally:
                if taken:
                    await con.execute("SELECT pg_advisory_unlock($1)", key)

    async def load_snapshot(self, name: str) -> tuple[int, dict[str, Any]] | None:
        async with self._connection() as con:
            row = await con.fetchrow("SELECT position, state FROM snapshots WHERE name = $1", name)
        return (int(row["position"]), dict(row["state"])) if row else None

    async def snapshot_position(self, name: str) -> int:
        async with self._connection() as con:
            value = await con.fetchval("SELECT position FROM snapshots WHERE name = $1", name)
        return int(value) if value is not None else 0

    async def log_id(self) -> str:
        async with self._connection() as con:
            return str(await con.fetchval("SELECT id FROM log_identity"))

    async def tracked_position(self, consumer: str) -> int:
        async with self._connection() as con:
            value = await con.fetchval("SELECT position FROM tracking WHERE consumer = $1", consumer)
        return int(value) if value is not None else 0

    async def track(self, consumer: str, position: int) -> None:
        async with self._connection() as con:
            await self._track(con, consumer, position)

    @staticmethod
    async def _track(con: asyncpg.Connection, consumer: str, position: int) -> None:
        await con.execute(
            """
            INSERT INTO tracking (consumer, position) VALUES ($1, $2)
            ON CONFLICT (consumer) DO UPDATE SET position = EXCLUDED.position, updated_at = now()
            """,
            consumer,
            position,
        )
