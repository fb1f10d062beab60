"""The relay: publishes every committed event to ``tessera.events``, in log order, keyed by stream.

Every ``JobAdmitted`` and every ``JobPreempted`` (the job is pending again) is also written to
``tessera.placement`` (keyed by job id), the work topic the placement workers share as a consumer
group; being derived from the log, no admitted or requeued job can miss its work item.

It reads ``position > cursor`` (safe because appends commit in position order, see
``postgres.py``), sends the batch and waits for the broker's acknowledgement, and records the
cursor in the ``tracking`` table at most once a second (and whenever it falls idle).  A crash
republishes what came after the recorded cursor on restart: duplicates, never gaps.  Consumers
drop an event whose position they have already folded.  It wakes on ``NOTIFY tessera_events``
and polls as a fallback.  While busy it pauses ``TESSERA_GATHER_MS`` after each publish, so one
read and one produce carry the appends of several writers.

Run it as a process: ``python -m shared.eventstore.relay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

import asyncpg

from shared import metrics
from shared.bus import tracing
from shared.bus.gather import gather_pause
from shared.bus.producer import BusProducer
from shared.bus.topics import EVENTS, PLACEMENT
from shared.eventstore.port import StoreUnavailableError
from shared.eventstore.postgres import NOTIFY_CHANNEL, TRANSIENT, Envelope, PostgresEventStore
from shared.eventstore.retry import until_available
from shared.service import run_service, service_topics
from shared.settings import Settings
from shared.state.readiness import mark_ready

RELAY_CONSUMER = "relay:tessera.events"
LISTENER_TRANSIENT: tuple[type[BaseException], ...] = (*TRANSIENT, asyncpg.InterfaceError)
"""The store's transient errors, and "connection is closed" from the relay's own LISTEN
connection, which no pool reopens."""


def headers_of(event: Envelope, log_id: str = "") -> tracing.Headers:
    """Position, type and version ride in the headers (and the stream in the key), so a consumer
    can skip an event, or note only its stream's version, without decoding its body; ``log`` names
    the event log they come from (see ``migrations/003_log_identity.sql``)."""
    headers: tracing.Headers = [
        ("position", str(event.position).encode()),
        ("type", event.type.encode()),
        ("version", str(event.version).encode()),
    ]
    if log_id:
        headers.append(("log", log_id.encode()))
    if event.traceparent is not None:
        headers.append(("traceparent", event.traceparent.encode()))
    return headers


WORK_EVENTS = frozenset({"JobAdmitted", "JobPreempted"})
"""Events after which a job is pending and some placement worker must own it."""


class Relay:
    def __init__(
        self,
        store: PostgresEventStore,
        producer: BusProducer,
        batch: int = 500,
        poll_s: float = 0.2,
        topic: str = EVENTS,
        name: str = RELAY_CONSUMER,
        work_topic: str | None = PLACEMENT,
        gather_ms: int = 0,
        track_s: float = 1.0,
    ) -> None:
        self.store = store
        self.topic = topic
        self.work_topic = work_topic
        self.name = name
        self.producer = producer
        self.batch = batch
        self.poll_s = poll_s
        self.published = 0
        self.log_id = ""
        self.gather_ms = gather_ms
        self.track_s = track_s

    async def publish(self, events: Sequence[Envelope]) -> None:
        # The log topic has one partition (its total order): whole record batches, no key hashing.
        log = [(e.stream, e.body, headers_of(e, self.log_id)) for e in events]
        sends = [self.producer.send_batched(self.topic, 0, log)]
        if self.work_topic:
            work = [
                (e.stream.removeprefix("job-"), body, headers)
                for e, (_, body, headers) in zip(events, log, strict=True)
                if e.type in WORK_EVENTS
            ]
            if work:  # in parallel: a worker holds a work item until its job is folded from the log
                sends.append(self.producer.send_many(self.work_topic, work))
        await asyncio.gather(*sends)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set, riding out PostgreSQL restarts as every service does
        (:func:`~shared.eventstore.retry.until_available`: a capped backoff, a warning each try)."""
        with contextlib.suppress(StoreUnavailableError):  # raised only once ``stop`` is set
            await until_available(lambda: self._run_reconnecting(stop), "relay", stop=stop)

    async def _run_reconnecting(self, stop: asyncio.Event) -> None:
        try:
            await self._run_connected(stop)
        except LISTENER_TRANSIENT as exc:
            raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc

    async def _run_connected(self, stop: asyncio.Event) -> None:
        wake = asyncio.Event()
        listener: asyncpg.Connection = await asyncpg.connect(self.store.dsn)
        await listener.add_listener(NOTIFY_CHANNEL, lambda *_: wake.set())
        self.log_id = await self.store.log_id()
        cursor = tracked = await self.store.tracked_position(self.name)
        tracked_at = time.monotonic()
        mark_ready("relay")
        try:
            while not stop.is_set():
                events = await self.store.read_envelopes(cursor, self.batch)
                if events:
                    await self.publish(events)
                    cursor = events[-1].position
                    self.published += len(events)
                    metrics.RELAY_PUBLISHED.inc(len(events))
                    # Progress is recorded at most every track_s (a commit each): a crash republishes
                    # what came after it, and consumers drop positions they have folded.
                    if time.monotonic() - tracked_at >= self.track_s:
                        await self.store.track(self.name, cursor)
                        tracked, tracked_at = cursor, time.monotonic()
                    await gather_pause(True, self.gather_ms)  # let more appends land: one read for them
                    continue
                if tracked != cursor:  # idle: record where we are
                    await self.store.track(self.name, cursor)
                    tracked, tracked_at = cursor, time.monotonic()
                wake.clear()
                waiters = [asyncio.create_task(wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
        finally:
            await listener.close(timeout=2)


async def main(
    stop: asyncio.Event, topic: str | None = None, name: str = RELAY_CONSUMER, work_topic: str | None = None
) -> None:
    settings = Settings()
    names = settings.topics
    topic = topic or names.events
    work_topic = names.placement if work_topic is None else work_topic
    await service_topics(settings)
    store = await PostgresEventStore.connect(
        settings.database_url, max_size=settings.db_pool_max, wait_s=settings.start_wait_s
    )
    async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-relay") as producer:
        relay = Relay(
            store,
            producer,
            settings.relay_batch,
            settings.relay_poll_s,
            topic,
            name,
            work_topic or None,
            gather_ms=settings.gather_ms,
        )
        try:
            await relay.run(stop)
        finally:
            await store.close()


if __name__ == "__main__":
    import sys

    # Optional arguments (tests): topic, relay name and work topic ("" for none), so several relays
    # can share a broker.
    run_service(lambda stop: main(stop, *sys.argv[1:4]))
