"""One suite for the event-store port, run against every adapter (in-memory and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from shared.eventstore import ANY_VERSION, NO_STREAM, ConcurrencyError, EventStore, NewEvent
from shared.eventstore.memory import InMemoryEventStore
from shared.eventstore.postgres import PostgresEventStore
from tests.conftest import create_database, drop_database


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.integration)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[EventStore]:
    if request.param == "memory":
        yield InMemoryEventStore()
        return
    server = request.getfixturevalue("database_url")
    url = await create_database(server)
    pg = await PostgresEventStore.connect(url, max_size=4)
    try:
        yield pg
    finally:
        await pg.close()
        await drop_database(server, url)


def ev(stream: str, kind: str = "Happened", **data: object) -> NewEvent:
    return NewEvent(stream=stream, type=kind, data=data)


async def test_a_new_stream_starts_at_version_one_and_counts_up(store: EventStore) -> None:
    recorded = await store.append([ev("job-1", n=1), ev("job-1", n=2)], {"job-1": NO_STREAM})
    assert [r.version for r in recorded] == [1, 2]
    assert await store.stream_version("job-1") == 2
    assert [r.data["n"] for r in await store.read_stream("job-1")] == [1, 2]


async def test_a_stale_expected_version_raises_and_writes_nothing(store: EventStore) -> None:
    await store.append([ev("job-1")], {"job-1": NO_STREAM})
    with pytest.raises(ConcurrencyError) as info:
        await store.append([ev("job-1"), ev("node-a")], {"job-1": NO_STREAM, "node-a": NO_STREAM})
    assert info.value.conflicts == {"job-1": (0, 1)}
    assert await store.stream_version("node-a") == NO_STREAM
    assert await store.last_position() == 1


async def test_every_touched_stream_needs_an_expected_version(store: EventStore) -> None:
    with pytest.raises(ValueError, match="without an expected version"):
        await store.append([ev("a"), ev("b")], {"a": NO_STREAM})


async def test_an_expected_version_may_guard_a_stream_the_append_does_not_touch(store: EventStore) -> None:
    await store.append([ev("node-a")], {"node-a": NO_STREAM})
    with pytest.raises(ConcurrencyError):
        await store.append([ev("job-1")], {"job-1": NO_STREAM, "node-a": NO_STREAM})
    await store.append([ev("job-1")], {"job-1": NO_STREAM, "node-a": 1})


async def test_any_version_skips_the_check(store: EventStore) -> None:
    await store.append([ev("s")], {"s": ANY_VERSION})
    await store.append([ev("s")], {"s": ANY_VERSION})
    assert await store.stream_version("s") == 2


async def test_read_all_is_in_position_order_and_pages(store: EventStore) -> None:
    for i in range(5):
        await store.append([ev(f"s{i % 2}", i=i)], {f"s{i % 2}": ANY_VERSION})
    everything = await store.read_all(0, 100)
    assert [e.data["i"] for e in everything] == [0, 1, 2, 3, 4]
    positions = [e.position for e in everything]
    assert positions == sorted(positions)
    page = await store.read_all(positions[1], 2)
    assert [e.data["i"] for e in page] == [2, 3]


async def test_read_all_can_keep_only_some_types(store: EventStore) -> None:
    await store.append([ev("n1", "NodeRegistered", i=0), ev("j1", "JobAdmitted", i=1)], {"n1": 0, "j1": 0})
    await store.append([ev("j1", "JobPlaced", i=2), ev("n2", "NodeRegistered", i=3)], {"j1": 1, "n2": 0})
    nodes = await store.read_all(0, 100, types=["NodeRegistered"])
    assert [e.data["i"] for e in nodes] == [0, 3]
    assert [e.data["i"] for e in await store.read_all(nodes[0].position, 100, types=["NodeRegistered"])] == [
        3
    ]
    assert [e.data["i"] for e in await store.read_all(0, 1, types=["NodeRegistered", "JobPlaced"])] == [0]


async def test_read_streams_answers_many_streams_in_one_call(store: EventStore) -> None:
    await store.append([ev("job-a", i=0), ev("job-b", i=1), ev("job-a", i=2)], {"job-a": 0, "job-b": 0})
    found = await store.read_streams(["job-a", "job-b", "job-none"])
    assert {s: [e.data["i"] for e in es] for s, es in found.items()} == {"job-a": [0, 2], "job-b": [1]}
    first = await store.read_streams(["job-a", "job-none"], up_to_version=1)
    assert {s: [e.version for e in es] for s, es in first.items()} == {"job-a": [1]}


async def test_two_writers_racing_on_one_version_exactly_one_wins(store: EventStore) -> None:
    await store.append([ev("node-a")], {"node-a": NO_STREAM})

    async def write(who: str) -> str:
        try:
            await store.append([ev("node-a", "Placed", by=who)], {"node-a": 1})
            return "won"
        except ConcurrencyError:
            return "lost"

    outcomes = await asyncio.gather(*(write(w) for w in ("w1", "w2", "w3", "w4")))
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    assert await store.stream_version("node-a") == 2


async def test_tracking_is_recorded_in_the_same_transaction_as_the_events(store: EventStore) -> None:
    await store.append([ev("job-1")], {"job-1": NO_STREAM}, tracking=("placement", 41))
    assert await store.tracked_position("placement") == 41
    with pytest.raises(ConcurrencyError):
        await store.append([ev("job-1")], {"job-1": NO_STREAM}, tracking=("placement", 42))
    assert await store.tracked_position("placement") == 41
    await store.track("placement", 43)
    assert await store.tracked_position("placement") == 43
    assert await store.tracked_position("nobody") == 0


async def test_snapshots_keep_the_newest_state(store: EventStore) -> None:
    assert await store.load_snapshot("cluster") is None
    assert await store.snapshot_position("cluster") == 0
    await store.save_snapshot("cluster", 10, {"nodes": 3})
    await store.save_snapshot("cluster", 5, {"nodes": 1})
    assert await store.load_snapshot("cluster") == (10, {"nodes": 3})
    assert await store.snapshot_position("cluster") == 10
    await store.save_snapshot("cluster", 12, {"nodes": 4})
    assert await store.load_snapshot("cluster") == (12, {"nodes": 4})


@pytest.mark.integration
async def test_postgres_refuses_to_update_or_delete_events(fresh_database: str) -> None:
    store = await PostgresEventStore.connect(fresh_database, max_size=2)
    try:
        await store.append([ev("s")], {"s": NO_STREAM})
        con = await asyncpg.connect(fresh_database)
        try:
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await con.execute("UPDATE events SET type = 'Forged'")
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await con.execute("DELETE FROM events")
        finally:
            await con.close()
    finally:
        await store.close()


async def test_a_log_has_one_identity(store: EventStore) -> None:
    first = await store.log_id()
    await store.append([ev("s")], {"s": NO_STREAM})
    assert first and await store.log_id() == first


@pytest.mark.integration
async def test_postgres_exclusive_lets_one_holder_in_at_a_time(fresh_database: str) -> None:
    a = await PostgresEventStore.connect(fresh_database, max_size=2)
    b = await PostgresEventStore.connect(fresh_database, max_size=2)
    try:
        async with a.exclusive(42) as first, b.exclusive(42) as second:
            assert first and not second
        async with b.exclusive(42) as again:
            assert again  # released when the first holder left
    finally:
        await a.close()
        await b.close()
