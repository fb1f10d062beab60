"""Admission service: ``tessera.submissions`` -> validated, authorised, admitted or rejected.

Appends to PostgreSQL before committing the Kafka offset, so a crash redelivers and the
idempotent handlers make the redelivery harmless.  Run: ``python -m services.admission.app``.
"""

from __future__ import annotations

import asyncio
import logging

from schemas.commands import CommandAdapter
from services.admission.batch import ATTEMPTS, Admission
from services.admission.handlers import QueueRights
from shared import metrics
from shared.bus import BusConsumer, BusProducer
from shared.eventstore.postgres import PostgresEventStore
from shared.service import run_service, service_topics
from shared.settings import Settings
from shared.state.readiness import mark_ready

log = logging.getLogger("tessera.admission")


def configured_queues(settings: Settings) -> QueueRights:
    """``TESSERA_QUEUES``: the queues open to their tenants before a queue tree is applied."""
    return {queue: tuple(tenants) for queue, tenants in settings.queues.items()}


async def run(stop: asyncio.Event, settings: Settings | None = None) -> None:
    settings = settings or Settings()
    names = settings.topics
    await service_topics(settings)
    store = await PostgresEventStore.connect(
        settings.database_url, max_size=settings.db_pool_max, wait_s=settings.start_wait_s
    )
    admission = Admission(store, configured_queues(settings))
    await admission.nodes.refresh(store)
    async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-admission") as producer:
        consumer = BusConsumer(
            settings.kafka_bootstrap_servers,
            f"{settings.topic_prefix}-admission",
            [names.submissions],
            CommandAdapter,
            producer,
            dead_letter_topic=names.deadletter,
            gather_ms=settings.gather_ms,
            max_poll_interval_ms=settings.kafka_max_poll_interval_ms,
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
                # The batch's offsets are committed only once it is written: while PostgreSQL is
                # away the same batch waits and is tried again, so no accepted job is lost.  A stop
                # ends the wait with nothing committed: the group's next member gets the batch.
                verdicts = await admission.decide_riding_out([d.value for d in batch], stop)
                if verdicts is None:
                    break
                for delivery, verdict in zip(batch, verdicts, strict=True):
                    log.debug("%s %s", delivery.key, verdict)
                    metrics.ADMISSION_VERDICTS.labels(verdict).inc()
                    if verdict == "conflict":  # not handled: kept, with why, instead of dropped
                        await consumer.dead_letter(
                            delivery.record, f"admission gave up after {ATTEMPTS} conflicting appends"
                        )
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
