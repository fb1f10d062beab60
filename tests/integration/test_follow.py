"""A follower starts where its restored view ends, not at the beginning of the log topic."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from shared.bus import BusProducer, ensure_topics
from shared.state.fold import ClusterView
from shared.state.follow import EventFollower

pytestmark = pytest.mark.integration


def envelope(position: int) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    body = {
        "position": position,
        "stream": "node-a",
        "version": position,
        "type": "Counted",
        "data": {},
        "metadata": {},
        "recorded_at": "2026-01-01T00:00:00+00:00",
    }
    headers = [
        ("position", str(position).encode()),
        ("type", b"Counted"),
        ("version", str(position).encode()),
    ]
    return "node-a", json.dumps(body).encode(), headers


async def follow(
    kafka: str, topic: str, view: ClusterView, start_at: float | None, until: int
) -> EventFollower:
    follower = EventFollower(view, kafka, topic, start_at=start_at, clock_skew_s=0.0)
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        for _ in range(100):
            if view.position >= until:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await task
    return follower


async def test_a_restored_follower_reads_only_what_came_after_its_restore(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"it.events.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1})
    async with BusProducer(kafka_bootstrap) as producer:
        await producer.send_many(topic, [envelope(p) for p in range(1, 201)])
        await asyncio.sleep(1.1)  # Kafka stamps in milliseconds: leave a clear gap
        restored_at = time.time()
        await asyncio.sleep(0.1)
        await producer.send_many(topic, [envelope(p) for p in range(201, 206)])

    restored = ClusterView()
    restored.advance(200, "node-a", 200)  # as if folded from the store up to position 200
    follower = await follow(kafka_bootstrap, topic, restored, restored_at, until=205)
    assert restored.position == 205 and restored.node_version("a") == 205
    assert follower.received == 5  # not the 200 before the restore

    fresh = ClusterView()
    everything = await follow(kafka_bootstrap, topic, fresh, None, until=205)
    assert fresh.position == 205 and everything.received == 205


async def test_with_nothing_newer_than_the_restore_the_follower_waits_at_the_end(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"it.events.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1})
    async with BusProducer(kafka_bootstrap) as producer:
        await producer.send_many(topic, [envelope(p) for p in range(1, 51)])
        await asyncio.sleep(1.1)
        restored = ClusterView()
        restored.advance(50, "node-a", 50)
        view_task = asyncio.create_task(follow(kafka_bootstrap, topic, restored, time.time(), until=52))
        await asyncio.sleep(1.5)  # the follower has sought to the end by now
        await producer.send_many(topic, [envelope(p) for p in (51, 52)])
        follower = await view_task
    assert restored.position == 52 and follower.received == 2
