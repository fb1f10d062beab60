"""Kafka (aiokafka): topics, an idempotent producer, consumers with manual commits, dead letters."""

from shared.bus.consumer import BusConsumer, Delivery
from shared.bus.producer import BusProducer
from shared.bus.topics import DEADLETTER, EVENTS, PLACEMENT, SUBMISSIONS, TELEMETRY, ensure_topics

__all__ = [
    "DEADLETTER",
    "EVENTS",
    "PLACEMENT",
    "SUBMISSIONS",
    "TELEMETRY",
    "BusConsumer",
    "BusProducer",
    "Delivery",
    "ensure_topics",
]
