"""Event store and bus throughput against the real PostgreSQL and Kafka.

Measures, in one run on this machine:
* appends/s, one event per transaction (8 concurrent writers);
* appends/s batched (events/s with 100 events per transaction, 8 writers);
* relay lag from append to Kafka delivery (p50, p99) at a paced 1,000 events/s;
* Kafka produce-then-consume rate of 200-byte messages.
Uses a scratch database and scratch topics.  Ends with one JSON line.

    .venv/bin/python loadtests/bench_eventstore.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

import numpy as np
from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.table import Table

from shared.bus import BusProducer, ensure_topics
from shared.eventstore import ANY_VERSION, NewEvent
from shared.eventstore.databases import create_database, drop_database
from shared.eventstore.postgres import PostgresEventStore
from shared.eventstore.relay import Relay
from shared.settings import Settings

WRITERS = 8


async def appends_per_s(store: PostgresEventStore, total: int, batch: int) -> float:
    async def writer(w: int) -> None:
        for _ in range(total // WRITERS // batch):
            events = [NewEvent(f"bench-{w}", "Tick", {"w": w}) for _ in range(batch)]
            await store.append(events, {f"bench-{w}": ANY_VERSION})

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    return (total // WRITERS // batch * batch * WRITERS) / (time.perf_counter() - start)


async def relay_lag(store: PostgresEventStore, bootstrap: str, seconds: float, rate: int) -> np.ndarray:
    topic = f"bench.events.{uuid.uuid4().hex[:8]}"
    await ensure_topics(bootstrap, extra={topic: 1})
    start_position = await store.last_position()
    await store.track(f"relay-{topic}", start_position)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    lags: list[float] = []
    stop = asyncio.Event()
    async with BusProducer(bootstrap, client_id="bench-relay") as producer:
        relay = Relay(store, producer, batch=500, poll_s=0.05, topic=topic, name=f"relay-{topic}")
        relay_task = asyncio.create_task(relay.run(stop))
        expected = int(seconds * rate)

        async def consume() -> None:
            while len(lags) < expected:
                batch = await consumer.getmany(timeout_ms=500)
                now = time.time()
                for records in batch.values():
                    lags.extend(now - json.loads(r.value)["data"]["sent_at"] for r in records)

        async def produce() -> None:
            tick, per_tick = 0.01, max(1, rate // 100)
            begin = time.perf_counter()
            for i in range(expected // per_tick):
                target = begin + i * tick
                await asyncio.sleep(max(0.0, target - time.perf_counter()))
                sent = time.time()
                await store.append(
                    [NewEvent("lag", "Tick", {"sent_at": sent}) for _ in range(per_tick)],
                    {"lag": ANY_VERSION},
                )

        await asyncio.wait_for(asyncio.gather(produce(), consume()), timeout=seconds * 4 + 30)
        stop.set()
        await relay_task
    await consumer.stop()
    return np.array(lags) * 1000.0


async def kafka_rate(bootstrap: str, messages: int) -> tuple[float, float, float]:
    topic = f"bench.kafka.{uuid.uuid4().hex[:8]}"
    await ensure_topics(bootstrap, extra={topic: 4})
    payload = b"x" * 200
    start = time.perf_counter()
    async with BusProducer(bootstrap, client_id="bench-kafka", linger_ms=5) as producer:
        for chunk in range(0, messages, 5000):
            await producer.send_many(
                topic, [(str(i), payload, []) for i in range(chunk, min(messages, chunk + 5000))]
            )
    produced = time.perf_counter()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None, max_poll_records=5000
    )
    await consumer.start()
    got = 0
    while got < messages:
        batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
        got += sum(len(r) for r in batch.values())
    consumed = time.perf_counter()
    await consumer.stop()
    return messages / (produced - start), messages / (consumed - produced), messages / (consumed - start)


async def main(seconds: float) -> None:
    settings = Settings()
    console = Console(width=120)
    scratch = await create_database(settings.database_url, f"bench_{uuid.uuid4().hex[:8]}")
    store = await PostgresEventStore.connect(scratch, max_size=WRITERS + 4)
    try:
        with console.status("appending one event per transaction"):
            single = await appends_per_s(store, 4000, 1)
        with console.status("appending 100 events per transaction"):
            batched = await appends_per_s(store, 80_000, 100)
        with console.status(f"relaying 1,000 events/s for {seconds:.0f} s"):
            lags = await relay_lag(store, settings.kafka_bootstrap_servers, seconds, 1000)
        with console.status("producing and consuming 200,000 Kafka messages"):
            produce, consume, end_to_end = await kafka_rate(settings.kafka_bootstrap_servers, 200_000)
    finally:
        await store.close()
        await drop_database(settings.database_url, scratch)
    figures = {
        "appends_per_s": round(single),
        "appends_per_s_batched": round(batched),
        "relay_lag_p50_ms": round(float(np.percentile(lags, 50)), 1),
        "relay_lag_p99_ms": round(float(np.percentile(lags, 99)), 1),
        "kafka_msgs_per_s": round(end_to_end),
    }
    table = Table(title="event store and bus (8 writers; real PostgreSQL and Kafka on this machine)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    table.add_row("appends/s, 1 event per transaction", f"{single:,.0f}", "")
    table.add_row("events/s, 100 per transaction", f"{batched:,.0f}", ">= 5,000")
    table.add_row("relay lag p50 (ms) at 1,000 events/s", f"{figures['relay_lag_p50_ms']}", "")
    table.add_row("relay lag p99 (ms) at 1,000 events/s", f"{figures['relay_lag_p99_ms']}", "< 200")
    table.add_row("kafka produce msgs/s (200 B)", f"{produce:,.0f}", "")
    table.add_row("kafka consume msgs/s", f"{consume:,.0f}", "")
    table.add_row("kafka produce+consume msgs/s", f"{end_to_end:,.0f}", "")
    console.print(table)
    print(json.dumps(figures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="event store, relay and Kafka benchmark")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the paced relay-lag phase")
    asyncio.run(main(parser.parse_args().seconds))
