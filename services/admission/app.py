"""Admission service: ``tessera.submissions`` -> validated, authorised, admitted or rejected.

Appends to PostgreSQL before committing the Kafka offset, so a crash redelivers and the
idempotent handlers make the redelivery harmless.  Run: ``python -m services.admission.app``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

from schemas.commands import CancelJob, CommandAdapter, SubmitJob
from services.admission.handlers import Outcome, QueueRights, admit, cancel
from shared.bus import BusConsumer, BusProducer, ensure_topics
from shared.eventstore import ConcurrencyError
from shared.eventstore.postgres import PostgresEventStore
from shared.service import run_service
from shared.settings import Settings
from shared.state.fold import ClusterView
from shared.state.follow import catch_up, restore
from shared.state.readiness import mark_ready

log = logging.getLogger("tessera.admission")
DEFAULT_QUEUES: QueueRights = {"default": ("*",), "research": ("*",), "batch": ("*",), "inference": ("*",)}


def queues_from_env() -> QueueRights:
    """``TESSERA_QUEUES``: JSON ``{"queue": ["tenant", ...] or ["*"]}``; default: four open queues."""
    raw = os.environ.get("TESSERA_QUEUES")
    if not raw:
        return DEFAULT_QUEUES
    return {q: tuple(t) for q, t in json.loads(raw).items()}


async def handle(store: PostgresEventStore, view: ClusterView, queues: QueueRights, command: object) -> str:
    for _ in range(3):
        await catch_up(view, store)
        outcome: Outcome
        if isinstance(command, SubmitJob):
            outcome = admit(view, queues, command.spec)
        elif isinstance(command, CancelJob):
            outcome = cancel(view, command.job_id, command.reason)
        else:
            return "ignored"
        if not outcome.events:
            return outcome.verdict
        try:
            await store.append(outcome.events, outcome.expected)
            return outcome.verdict
        except ConcurrencyError:
            continue  # another admission instance (or a redelivery) got there first: decide again
    return "conflict"


async def handle_batch(
    store: PostgresEventStore, view: ClusterView, queues: QueueRights, commands: list[object]
) -> list[str]:
    """Decide a whole poll batch against one view and append it in one transaction.

    Submissions in one batch that share an id are left to the one-by-one path, as is the whole
    batch when the append conflicts (another admission instance, or a redelivery), so the
    outcome is always what deciding the messages one at a time would give.
    """
    await catch_up(view, store)
    seen: set[str] = set()
    events = []
    expected: dict[str, int] = {}
    verdicts: list[str] = []
    slow: list[int] = []
    for i, command in enumerate(commands):
        if not isinstance(command, SubmitJob) or command.spec.id in seen:
            slow.append(i)
            verdicts.append("")
            continue
        seen.add(command.spec.id)
        outcome = admit(view, queues, command.spec)
        events.extend(outcome.events)
        expected.update(outcome.expected)
        verdicts.append(outcome.verdict)
    try:
        if events:
            await store.append(events, expected)
    except ConcurrencyError:
        return [await handle(store, view, queues, c) for c in commands]
    for i in slow:
        verdicts[i] = await handle(store, view, queues, commands[i])
    return verdicts


async def run(stop: asyncio.Event, settings: Settings | None = None) -> None:
    settings = settings or Settings()
    names = settings.topics
    await ensure_topics(settings.kafka_bootstrap_servers, settings.topic_partitions, names=names)
    store = await PostgresEventStore.connect(settings.database_url, max_size=settings.db_pool_max)
    view = await restore(store)  # snapshot plus tail
    queues = queues_from_env()
    async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-admission") as producer:
        consumer = BusConsumer(
            settings.kafka_bootstrap_servers,
            f"{settings.topic_prefix}-admission",
            [names.submissions],
            CommandAdapter,
            producer,
            dead_letter_topic=names.deadletter,
        )
        await consumer.start()
        try:
            ready = False
            async for batch in consumer.batches(stop):
                if not ready and consumer.assigned():
                    mark_ready("admission")
                    ready = True
                if not batch:
                    continue
                verdicts = await handle_batch(store, view, queues, [d.value for d in batch])
                for delivery, verdict in zip(batch, verdicts, strict=True):
                    log.debug("%s %s", delivery.key, verdict)
                    consumer.mark(delivery.record)
                log.info("batch of %d: %s", len(batch), {v: verdicts.count(v) for v in set(verdicts)})
                await consumer.commit()
        finally:
            await consumer.stop()
            await store.close()


def main() -> None:
    run_service(run)


if __name__ == "__main__":
    main()
