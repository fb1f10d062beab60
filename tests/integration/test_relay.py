"""The relay publishes every committed event to Kafka in log order, also across its own SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from shared.bus import ensure_topics
from shared.eventstore import ANY_VERSION, NewEvent
from shared.eventstore.postgres import PostgresEventStore

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WRITERS, PER_WRITER, BATCH = 8, 1000, 10


async def _start_relay(kafka: str, database: str, topic: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
        "DATABASE_URL": database,
        "TESSERA_RELAY_BATCH": "200",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "shared.eventstore.relay", topic, f"relay-{topic}", "", cwd=ROOT, env=env
    )


async def _writer(store: PostgresEventStore, w: int) -> None:
    stream = f"writer-{w}"
    for start in range(0, PER_WRITER, BATCH):
        events = [NewEvent(stream, "Counted", {"w": w, "i": i}) for i in range(start, start + BATCH)]
        # Concurrent writers interleave; ANY_VERSION because each writer owns its stream.
        await store.append(events, {stream: ANY_VERSION})


async def _collect(kafka: str, topic: str, want: int, timeout: float) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka, auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    seen: set[int] = set()
    received: list[dict[str, Any]] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(seen) < want and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for r in records:
                    event = json.loads(r.value)
                    received.append(event)
                    seen.add(int(event["position"]))
    finally:
        await consumer.stop()
    return received


@pytest.mark.parametrize("kill_midway", [False, True], ids=["steady", "relay-sigkilled-and-restarted"])
async def test_eight_writers_reach_kafka_complete_and_in_log_order(
    kafka_bootstrap: str, fresh_database: str, unique: str, kill_midway: bool
) -> None:
    topic = f"it.events.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1})
    store = await PostgresEventStore.connect(fresh_database, max_size=WRITERS + 2)
    relay = await _start_relay(kafka_bootstrap, fresh_database, topic)
    try:
        writers = [asyncio.create_task(_writer(store, w)) for w in range(WRITERS)]
        if kill_midway:
            while await store.last_position() < WRITERS * PER_WRITER // 3:
                await asyncio.sleep(0.05)
            relay.send_signal(signal.SIGKILL)
            await relay.wait()
            await asyncio.sleep(0.5)  # writers keep going while no relay runs
            relay = await _start_relay(kafka_bootstrap, fresh_database, topic)
        await asyncio.gather(*writers)
        logged = await store.read_all(0, WRITERS * PER_WRITER + 1)
        received = await _collect(kafka_bootstrap, topic, WRITERS * PER_WRITER, timeout=90)
    finally:
        if relay.returncode is None:
            relay.send_signal(signal.SIGTERM)
            await relay.wait()
        await store.close()

    assert len(logged) == WRITERS * PER_WRITER
    first_seen: list[int] = []
    seen: set[int] = set()
    for event in received:
        position = int(event["position"])
        if position not in seen:
            seen.add(position)
            first_seen.append(position)
    # None missing, and in log order: the distinct positions arrive exactly as the log has them.
    assert first_seen == [e.position for e in logged]
    # A duplicate may only repeat the tail of what was published before a crash.
    if not kill_midway:
        assert len(received) == len(logged)
    per_stream: dict[str, list[int]] = {}
    for event in received:
        per_stream.setdefault(str(event["stream"]), []).append(int(event["version"]))
    for versions in per_stream.values():
        distinct = list(dict.fromkeys(versions))
        assert distinct == list(range(1, PER_WRITER + 1))
