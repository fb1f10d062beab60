"""A Kafka consumer with manual commits, pydantic decoding and a dead-letter topic.

Lifecycle contract (written here because aiokafka leaves it to the caller):

* Offsets are committed only by :meth:`BusConsumer.commit`, after the handler has made its effects
  durable (appended to PostgreSQL).  A crash before the commit redelivers; handlers are idempotent.
* On a rebalance the listener commits what was processed *before* the partitions are revoked, so
  the next owner starts exactly after it; assignment needs nothing (committed offsets apply).
* A message that does not decode goes to ``tessera.deadletter`` with its original bytes and the
  reason in headers (``x-error``, ``x-source-topic``, ``x-source-partition``, ``x-source-offset``),
  is counted as processed, and the consumer goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord
from opentelemetry import context as otel_context
from pydantic import TypeAdapter, ValidationError

from shared.bus import tracing
from shared.bus.gather import gather_pause
from shared.bus.producer import BusProducer
from shared.bus.topics import DEADLETTER

log = logging.getLogger("tessera.bus")

T = TypeVar("T")


@dataclass(frozen=True)
class Delivery(Generic[T]):
    value: T
    record: ConsumerRecord[bytes, bytes]
    context: otel_context.Context

    @property
    def key(self) -> str | None:
        return self.record.key.decode() if self.record.key else None


async def commit_or_yield(consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> bool:
    """Commit ``offsets``; False, with a warning, when Kafka refuses because the group moved on
    (a rebalance, as a broker restart causes, gave the partitions to another member or dropped
    this one).  Nothing is lost: the partitions' next owner gets the uncommitted messages again,
    and every consumer here takes a redelivery for the duplicate it is.  (Raising instead took
    a placement worker down in a Kafka restart.)"""
    try:
        await consumer.commit(offsets)
    except KafkaError as exc:
        log.warning("offsets not committed (%s): the partitions' next owner gets them again", exc)
        return False
    return True


class _CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: BusConsumer[object]) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._owner.commit(only=revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


class BusConsumer(Generic[T]):
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        topics: list[str],
        adapter: TypeAdapter[T],
        dead_letters: BusProducer | None = None,
        client_id: str = "tessera",
        auto_offset_reset: str = "earliest",
        dead_letter_topic: str = DEADLETTER,
        gather_ms: int = 0,
        max_poll_interval_ms: int = 300_000,
    ) -> None:
        self._topics = topics
        self._dead_letter_topic = dead_letter_topic
        self._adapter = adapter
        self._dead_letters = dead_letters
        self._processed: dict[TopicPartition, int] = {}
        self.dead_lettered = 0
        self._gather_ms = gather_ms
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=500,
            max_poll_interval_ms=max_poll_interval_ms,
        )

    async def start(self) -> None:
        self._consumer.subscribe(self._topics, listener=_CommitOnRevoke(self))  # type: ignore[arg-type]
        await self._consumer.start()

    async def stop(self) -> None:
        try:
            await self.commit()
        finally:
            await self._consumer.stop()

    async def __aenter__(self) -> BusConsumer[T]:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def mark(self, record: ConsumerRecord[bytes, bytes]) -> None:
        """Count ``record`` as processed; :meth:`commit` makes it durable."""
        self._processed[TopicPartition(record.topic, record.partition)] = record.offset + 1

    async def commit(self, only: set[TopicPartition] | None = None) -> None:
        offsets = {tp: off for tp, off in self._processed.items() if only is None or tp in only}
        if offsets:
            await commit_or_yield(self._consumer, offsets)
            for tp in offsets:
                if self._processed.get(tp) == offsets[tp]:
                    del self._processed[tp]

    async def deliveries(self) -> AsyncIterator[Delivery[T]]:
        """Decoded messages; undecodable ones are dead-lettered and skipped."""
        async for record in self._consumer:
            delivery = await self._decode(record)
            if delivery is not None:
                yield delivery

    def assigned(self) -> bool:
        """Whether the group has given this consumer any partitions yet."""
        return bool(self._consumer.assignment())

    async def batches(self, stop: asyncio.Event, timeout_ms: int = 200) -> AsyncIterator[list[Delivery[T]]]:
        """Decoded messages in poll-sized batches until ``stop`` is set (commit after each batch).

        An empty batch is yielded when a poll returns nothing, so callers can do idle work."""
        while not stop.is_set():
            polled = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=500)
            batch: list[Delivery[T]] = []
            for records in polled.values():
                for record in records:
                    delivery = await self._decode(record)
                    if delivery is not None:
                        batch.append(delivery)
            if polled and not batch:
                await self.commit()  # only dead letters: record the progress anyway
            yield batch
            await gather_pause(bool(polled), self._gather_ms)

    async def _decode(self, record: ConsumerRecord[bytes, bytes]) -> Delivery[T] | None:
        try:
            if record.value is None:
                raise ValueError("empty message")
            value = self._adapter.validate_json(record.value)
        except (ValidationError, ValueError) as exc:
            await self.dead_letter(record, _reason(exc))
            self.mark(record)
            return None
        return Delivery(value=value, record=record, context=tracing.extract(list(record.headers or [])))

    async def dead_letter(self, record: ConsumerRecord[bytes, bytes], reason: str) -> None:
        """Put ``record`` on the dead-letter topic with ``reason`` (the caller still marks it)."""
        self.dead_lettered += 1
        if self._dead_letters is None:
            return
        headers = [
            ("x-error", reason.encode()[:4000]),
            ("x-source-topic", record.topic.encode()),
            ("x-source-partition", str(record.partition).encode()),
            ("x-source-offset", str(record.offset).encode()),
        ]
        key = record.key.decode(errors="replace") if record.key else None
        await self._dead_letters.send(self._dead_letter_topic, record.value or b"", key=key, headers=headers)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        kind = "not valid JSON" if first.get("type") == "json_invalid" else "does not match the schema"
        return f"{kind}: {where}: {first.get('msg', '')} ({exc.error_count()} error(s))"
    return str(exc)
