"""The event store: an append-only log of events in PostgreSQL (and an in-memory twin for tests)."""

from shared.eventstore.port import (
    ANY_VERSION,
    NO_STREAM,
    ConcurrencyError,
    EventStore,
    NewEvent,
    RecordedEvent,
    StoreUnavailableError,
)

__all__ = [
    "ANY_VERSION",
    "NO_STREAM",
    "ConcurrencyError",
    "EventStore",
    "NewEvent",
    "RecordedEvent",
    "StoreUnavailableError",
]
