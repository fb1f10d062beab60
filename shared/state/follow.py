"""Keeping a :class:`ClusterView` current: from the event store, then from ``tessera.events``.

A service rebuilds from the store on start (the source of truth), then follows the relay's
Kafka topic.  The topic is read from its beginning without a consumer group (every service needs
every event) and positions already folded are skipped, so relay duplicates and the overlap with
the store catch-up are harmless.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from shared.bus.gather import gather_pause
from shared.bus.topics import EVENTS
from shared.eventstore.port import EventStore, RecordedEvent
from shared.state.fold import SNAPSHOT_NAME, ClusterView, from_snapshot, to_snapshot

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


async def restore(store: EventStore, rotation: int = 0) -> ClusterView:
    """The view from the latest snapshot (if any) plus the log's tail after it."""
    found = await store.load_snapshot(SNAPSHOT_NAME)
    view = from_snapshot(found[1], rotation) if found is not None else ClusterView(rotation)
    tail = await catch_up(view, store)
    if found is not None:
        log.info("restored from a snapshot at position %d plus %d events", found[0], tail)
    else:
        log.info("restored from the log: %d events", tail)
    return view


async def save_snapshot(view: ClusterView, store: EventStore) -> None:
    await store.save_snapshot(SNAPSHOT_NAME, view.position, to_snapshot(view))


async def catch_up(view: ClusterView, store: EventStore, batch: int = 2000) -> int:
    """Fold every event the store has beyond ``view.position``; returns how many."""
    folded = 0
    while True:
        events = await store.read_all(view.position, batch)
        if not events:
            return folded
        folded += view.apply_all(events)


class EventFollower:
    """Folds ``tessera.events`` into a view; ``changed`` is set after each batch that moved it."""

    def __init__(self, view: ClusterView, bootstrap: str, topic: str = EVENTS, gather_ms: int = 0) -> None:
        self.view = view
        self.changed = asyncio.Event()
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self._gather_ms = gather_ms

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.start()
        try:
            while not stop.is_set():
                batch = await self._consumer.getmany(timeout_ms=200, max_records=2000)
                moved = 0
                for records in batch.values():
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

    async def wait_past(self, position: int, timeout: float) -> bool:
        """Wait until the view has folded ``position`` (True) or ``timeout`` passes (False)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.view.position < position:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                return False
        return True
