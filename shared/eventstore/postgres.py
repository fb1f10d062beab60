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

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg

from shared.eventstore.port import NO_STREAM, EventStore, NewEvent, RecordedEvent, check_expected

APPEND_LOCK = 0x7E55E7A  # advisory lock key serialising appends
MIGRATION_LOCK = 0x7E55E7B
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


class PostgresEventStore(EventStore):
    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self.pool = pool
        self.dsn = dsn

    @classmethod
    async def connect(cls, dsn: str, min_size: int = 1, max_size: int = 10) -> PostgresEventStore:
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=_init_connection)
        async with pool.acquire() as con:
            await migrate(con)
        return cls(pool, dsn)

    async def close(self) -> None:
        await self.pool.close()

    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        streams = {e.stream for e in events}
        async with self.pool.acquire() as con, con.transaction():
            await con.execute("SELECT pg_advisory_xact_lock($1)", APPEND_LOCK)
            names = sorted(set(expected) | streams)
            rows = await con.fetch(
                "SELECT stream, version FROM streams WHERE stream = ANY($1::text[])", names
            )
            actual = {r["stream"]: r["version"] for r in rows}
            check_expected(expected, actual, streams)
            versions = dict(actual)
            stream_col, version_col, type_col, data_col, meta_col = [], [], [], [], []
            for e in events:
                versions[e.stream] = versions.get(e.stream, NO_STREAM) + 1
                stream_col.append(e.stream)
                version_col.append(versions[e.stream])
                type_col.append(e.type)
                data_col.append(json.dumps(dict(e.data)))
                meta_col.append(json.dumps(dict(e.metadata)))
            recorded: list[RecordedEvent] = []
            if events:
                inserted = await con.fetch(
                    """
                    INSERT INTO events (stream, version, type, data, metadata)
                    SELECT s, v, t, d::jsonb, m::jsonb
                    FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[])
                         WITH ORDINALITY AS u(s, v, t, d, m, n)
                    ORDER BY n
                    RETURNING position, stream, version, recorded_at
                    """,
                    stream_col,
                    version_col,
                    type_col,
                    data_col,
                    meta_col,
                )
                # The bodies are the caller's: only what the database assigned comes back (decoding
                # the JSONB again cost as much as the insert).
                by_key = {(s, v): e for s, v, e in zip(stream_col, version_col, events, strict=True)}
                recorded = []
                for r in inserted:
                    sent = by_key[(r["stream"], r["version"])]
                    recorded.append(
                        RecordedEvent(
                            position=r["position"],
                            stream=r["stream"],
                            version=r["version"],
                            type=sent.type,
                            data=dict(sent.data),
                            metadata=dict(sent.metadata),
                            recorded_at=r["recorded_at"],
                        )
                    )
                recorded.sort(key=lambda r: r.position)
                heads = {s: v for s, v in versions.items() if s in streams}
                await con.execute(
                    """
                    INSERT INTO streams (stream, version) SELECT * FROM unnest($1::text[], $2::int[])
                    ON CONFLICT (stream) DO UPDATE SET version = EXCLUDED.version
                    """,
                    list(heads),
                    list(heads.values()),
                )
                await con.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, str(recorded[-1].position))
            if tracking is not None:
                await self._track(con, *tracking)
            return recorded

    async def stream_version(self, stream: str) -> int:
        async with self.pool.acquire() as con:
            version = await con.fetchval("SELECT version FROM streams WHERE stream = $1", stream)
        return int(version) if version is not None else NO_STREAM

    async def read_stream(self, stream: str, after_version: int = 0) -> list[RecordedEvent]:
        async with self.pool.acquire() as con:
            rows = await con.fetch(
                "SELECT * FROM events WHERE stream = $1 AND version > $2 ORDER BY version",
                stream,
                after_version,
            )
        return [_record(r) for r in rows]

    async def read_streams(
        self, streams: Collection[str], up_to_version: int | None = None
    ) -> dict[str, list[RecordedEvent]]:
        async with self.pool.acquire() as con:
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
        async with self.pool.acquire() as con:
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
        async with self.pool.acquire() as con:
            rows = await con.fetch(_ENVELOPES, after_position, limit)
        return [
            Envelope(
                r["position"], r["stream"], r["version"], r["type"], r["traceparent"], r["body"].encode()
            )
            for r in rows
        ]

    async def last_position(self) -> int:
        async with self.pool.acquire() as con:
            value = await con.fetchval("SELECT coalesce(max(position), 0) FROM events")
        return int(value)

    async def save_snapshot(self, name: str, position: int, state: Mapping[str, Any]) -> None:
        async with self.pool.acquire() as con:
            await con.execute(
                """
                INSERT INTO snapshots (name, position, state) VALUES ($1, $2, $3)
                ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, state = EXCLUDED.state,
                    taken_at = now()
                WHERE snapshots.position <= EXCLUDED.position
                """,
                name,
                position,
                dict(state),
            )

    async def load_snapshot(self, name: str) -> tuple[int, dict[str, Any]] | None:
        async with self.pool.acquire() as con:
            row = await con.fetchrow("SELECT position, state FROM snapshots WHERE name = $1", name)
        return (int(row["position"]), dict(row["state"])) if row else None

    async def snapshot_position(self, name: str) -> int:
        async with self.pool.acquire() as con:
            value = await con.fetchval("SELECT position FROM snapshots WHERE name = $1", name)
        return int(value) if value is not None else 0

    async def tracked_position(self, consumer: str) -> int:
        async with self.pool.acquire() as con:
            value = await con.fetchval("SELECT position FROM tracking WHERE consumer = $1", consumer)
        return int(value) if value is not None else 0

    async def track(self, consumer: str, position: int) -> None:
        async with self.pool.acquire() as con:
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
