"""The bus against a real Kafka broker."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from schemas import JobSpec, SubmitJob
from schemas.commands import Command, CommandAdapter
from shared.bus import BusConsumer, BusProducer, ensure_topics
from shared.bus.consumer import Delivery

pytestmark = pytest.mark.integration


async def _take(consumer: BusConsumer[Command], n: int, timeout: float = 30.0) -> list[Delivery[Command]]:
    got: list[Delivery[Command]] = []

    async def run() -> None:
        async for delivery in consumer.deliveries():
            got.append(delivery)
            consumer.mark(delivery.record)
            if len(got) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return got


def _submit(job_id: str) -> SubmitJob:
    return SubmitJob(spec=JobSpec.model_validate({"id": job_id, "tenant": "t", "resources": {"cpu": "500m"}}))


async def test_a_model_round_trips_through_kafka_with_its_trace_context(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"it.submissions.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 3})
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    async with BusProducer(kafka_bootstrap) as producer:
        with tracer.start_as_current_span("submit") as span:
            await producer.send_model(topic, _submit("job-1"), key="job-1")
            sent_trace = span.get_span_context().trace_id
    consumer = BusConsumer(kafka_bootstrap, f"g-{unique}", [topic], CommandAdapter)
    async with consumer:
        (delivery,) = await _take(consumer, 1)
    assert isinstance(delivery.value, SubmitJob) and delivery.value.spec.id == "job-1"
    assert delivery.key == "job-1"
    assert trace.get_current_span(delivery.context).get_span_context().trace_id == sent_trace


async def test_a_malformed_message_is_dead_lettered_and_the_consumer_goes_on(
    kafka_bootstrap: str, unique: str
) -> None:
    topic, dlq = f"it.in.{unique}", f"it.dlq.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1, dlq: 1})
    async with BusProducer(kafka_bootstrap) as producer:
        await producer.send(topic, b"{not json", key="bad-1")
        await producer.send(topic, b'{"type": "SubmitJob", "spec": {"id": "x"}}', key="bad-2")
        await producer.send_model(topic, _submit("good"), key="good")
        consumer = BusConsumer(
            kafka_bootstrap, f"g-{unique}", [topic], CommandAdapter, producer, dead_letter_topic=dlq
        )
        async with consumer:
            (delivery,) = await _take(consumer, 1)
            assert isinstance(delivery.value, SubmitJob) and delivery.value.spec.id == "good"
            assert consumer.dead_lettered == 2
    reader = AIOKafkaConsumer(
        dlq, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await reader.start()
    try:
        records: list[ConsumerRecord[bytes, bytes]] = []
        while len(records) < 2:
            batch = await reader.getmany(timeout_ms=5000)
            records += [r for rs in batch.values() for r in rs]
    finally:
        await reader.stop()
    assert records[0].value == b"{not json"
    reasons = [dict(r.headers)["x-error"].decode() for r in records]
    assert "not valid JSON" in reasons[0]
    assert "does not match the schema" in reasons[1] and "spec.tenant" in reasons[1]
    assert dict(records[0].headers)["x-source-topic"] == topic.encode()


async def test_committed_offsets_are_not_redelivered_and_uncommitted_ones_are(
    kafka_bootstrap: str, unique: str
) -> None:
    topic, group = f"it.commit.{unique}", f"g-{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1})
    async with BusProducer(kafka_bootstrap) as producer:
        for i in range(4):
            await producer.send_model(topic, _submit(f"job-{i}"), key=f"job-{i}")
    first = BusConsumer(kafka_bootstrap, group, [topic], CommandAdapter)
    await first.start()
    taken = await _take(first, 2)
    await first.commit()
    await first._consumer.stop()  # crash-like: no final commit of anything marked later
    second = BusConsumer(kafka_bootstrap, group, [topic], CommandAdapter)
    async with second:
        rest = await _take(second, 2)
    assert [d.value.spec.id for d in taken] == ["job-0", "job-1"]  # type: ignore[union-attr]
    assert [d.value.spec.id for d in rest] == ["job-2", "job-3"]  # type: ignore[union-attr]


async def test_batched_sends_arrive_complete_in_order_with_keys_and_headers(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"it.log.{unique}"
    await ensure_topics(kafka_bootstrap, extra={topic: 1})
    # 2,500 records of 1 KiB: more than one 1 MiB record batch, so batches must be chained in order.
    messages = [
        (f"s{i % 7}", f"{i:08d}".encode() + b"x" * 1016, [("position", str(i).encode())]) for i in range(2500)
    ]
    async with BusProducer(kafka_bootstrap) as producer:
        await producer.send_batched(topic, 0, messages)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    got: list[ConsumerRecord[bytes, bytes]] = []
    try:
        while len(got) < len(messages):
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            for records in batch.values():
                got += records
    finally:
        await consumer.stop()
    assert [int((r.value or b"")[:8]) for r in got] == list(range(2500))
    assert [r.key for r in got[:8]] == [f"s{i % 7}".encode() for i in range(8)]
    assert dict(got[1234].headers) == {"position": b"1234"}


async def test_a_prefix_topics_are_created_then_deleted_and_no_other(
    kafka_bootstrap: str, unique: str
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from shared.bus.topics import TopicNames, delete_topics, topic_layout

    mine, other = TopicNames(f"del{unique}"), TopicNames(f"keep{unique}")
    await ensure_topics(kafka_bootstrap, 2, names=mine)
    await ensure_topics(kafka_bootstrap, 2, names=other)
    assert await delete_topics(kafka_bootstrap, mine) == sorted(topic_layout(2, mine))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        for _ in range(50):  # deletion reaches the metadata asynchronously
            left = set(await admin.list_topics())
            if not left & set(topic_layout(2, mine)):
                break
            await asyncio.sleep(0.1)
        assert not left & set(topic_layout(2, mine))
        assert set(topic_layout(2, other)) <= left
    finally:
        await admin.close()
    picked = await delete_topics(kafka_bootstrap, lambda name: name.startswith(f"keep{unique}.sub"))
    assert picked == [other.submissions]  # a predicate picks by name
    await delete_topics(kafka_bootstrap, other)
