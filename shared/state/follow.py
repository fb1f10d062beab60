"""Keeping a :class:`ClusterView` current: from the event store, then from ``tessera.events``.

A service rebuilds from the store on start (the source of truth), then follows the relay's
Kafka topic.  The topic is read from its beginning without a consumer group (every service needs
every event) and positions already folded are skipped, so relay duplicates and the overlap with
the store catch-up are harmless.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from shared.bus.gather import gather_pause
from shared.bus.topics import EVENTS
from shared.eventstore.port import EventStore, RecordedEvent
from shared.eventstore.retry import until_available
from shared.settings import Settings
from shared.state.fold import SNAPSHOT_NAME, ClusterView, from_snapshot

log = logging.getLogger("tessera.state")


def decode_envelope(raw: bytes) -> RecordedEvent:
    body = json.loads(raw)
    return RecordedEvent(
        position=int(body["position"]),
        stream=body["stream"],
        version=int(body["version"]),
        type=body["type"],
        data=body["data"],
        metadata=body.get("metadata", {}),
        recorded_at=datetime.fromisoformat(body["recorded_at"]),
    )


async def restore(store: EventStore, rotation: int = 0, keep_ended: int | None = None) -> ClusterView:
    """The view from the latest snapshot (if any) plus the log's tail after it.  A snapshot of
    another format (written by an older release) is passed over: the whole log is replayed."""
    found = await store.load_snapshot(SNAPSHOT_NAME)
    view = ClusterView(rotation, keep_ended)
    if found is not None:
        try:
            view = from_snapshot(found[1], rotation, keep_ended)
        except ValueError as exc:
            log.warning("snapshot at position %d not used (%s): replaying the log", found[0], exc)
            found = None
    tail = await catch_up(view, store)
    if found is not None:
        log.info("restored from a snapshot at position %d plus %d events", found[0], tail)
    else:
        log.info("restored from the log: %d events", tail)
    return view


async def catch_up(view: ClusterView, store: EventStore, batch: int = 2000) -> int:
    """Fold every event the store has beyond ``view.position``; returns how many."""
    folded = 0
    while True:
        events = await store.read_all(view.position, batch)
        if not events:
            return folded
        folded += view.apply_all(events)


async def catch_up_when_available(view: ClusterView, store: EventStore, stop: asyncio.Event) -> int:
    """:func:`catch_up`, waiting out a store that is away (``until_available``) until it answers
    or ``stop`` is set (then the store's error goes to the caller)."""
    return await until_available(functools.partial(catch_up, view, store), "catching up", stop=stop)


def same_log(headers: dict[str, bytes], log_id: str) -> bool:
    """Whether a message comes from the event log ``log_id`` (no ``log_id``: accept all).

    An unstamped message was published before logs had identities, by an older relay: anything
    of this log that old is already in the view restored from the store, so it is not taken (the
    relay, the log topic's only producer, starts first in ``tessera up``)."""
    if not log_id:
        return True
    stamp = headers.get("log")
    return stamp is not None and stamp.decode() == log_id


class EventFollower:
    """Folds ``tessera.events`` into a view; ``changed`` is set after each batch that moved it.

    ``start_at`` (epoch seconds, taken just before the view's last catch-up from the store began)
    says where in the topic to start: every event the view lacks was committed after that
    moment, and the relay stamps a message when it publishes it, after the commit.  So the
    follower seeks to the first message stamped at or after ``start_at - clock_skew_s`` instead of
    reading the whole topic (a week of retention) on every start; the few older ones in the
    margin are skipped by position.  Without ``start_at`` it reads from the beginning.
    """

    def __init__(
        self,
        view: ClusterView,
        bootstrap: str,
        topic: str = EVENTS,
        gather_ms: int = 0,
        log_id: str = "",
        start_at: float | None = None,
        clock_skew_s: float = 60.0,
    ) -> None:
        self.view = view
        self.log_id = log_id  # events stamped with another log's identity are not ours: skipped
        self.foreign = 0
        self.received = 0  # records taken from the topic (a restart should read few)
        self.changed = asyncio.Event()
        self._topic = topic
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self._gather_ms = gather_ms
        self._start_at = None if start_at is None else start_at - clock_skew_s

    async def _seek(self) -> None:
        tp = TopicPartition(self._topic, 0)  # the log topic has one partition (shared/bus/topics.py)
        self._consumer.assign([tp])
        if self._start_at is None:
            return
        end = (await self._consumer.end_offsets([tp]))[tp]  # read first: nothing after it is skipped
        found = (await self._consumer.offsets_for_times({tp: int(1000 * self._start_at)})).get(tp)
        self._consumer.seek(tp, found.offset if found is not None else end)

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.start()
        await self._seek()
        try:
            while not stop.is_set():
                batch = await self._consumer.getmany(timeout_ms=200, max_records=2000)
                moved = 0
                for records in batch.values():
                    self.received += len(records)
                    for record in records:
                        moved += self._fold(record)
                if moved:
                    self.changed.set()
                await gather_pause(bool(batch), self._gather_ms)
        finally:
            await self._consumer.stop()

    def _fold(self, record: ConsumerRecord[bytes, bytes]) -> bool:
        """Fold one record, decoding its body only when the fold reads it (the relay's headers
        carry position, type and version, the key the stream)."""
        if record.value is None:
            return False
        headers = dict(record.headers)
        if not same_log(headers, self.log_id):
            self.foreign += 1
            if self.foreign == 1:
                log.warning(
                    "skipping events of another event log on %s (PostgreSQL reset while Kafka kept "
                    "its topics?)",
                    record.topic,
                )
            return False
        try:
            position = int(headers["position"])
            kind, version = headers["type"].decode(), int(headers["version"])
        except (KeyError, ValueError):
            return self.view.apply(decode_envelope(record.value))  # no routing headers: decode it all
        if position <= self.view.position:
            return False  # a duplicate, or already folded from the store
        stream = record.key.decode() if record.key is not None else ""
        if not stream or (self.view.needs_body(stream, kind) and not self.view.is_ahead(position)):
            return self.view.apply(decode_envelope(record.value))
        return self.view.advance(position, stream, version)


async def follow_log(
    view: ClusterView, store: EventStore, settings: Settings, start_at: float
) -> EventFollower:
    """How a service follows the log once its view is restored: the settings' topic and gather
    pause, this log's identity, and ``start_at`` taken before the view's last catch-up began."""
    return EventFollower(
        view,
        settings.kafka_bootstrap_servers,
        settings.topics.events,
        settings.gather_ms,
        await store.log_id(),
        start_at=start_at,
    )
