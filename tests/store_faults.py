"""An in-memory event store that fails chosen appends as PostgreSQL does when it goes away."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.eventstore import NewEvent, RecordedEvent, StoreUnavailableError
from shared.eventstore.memory import InMemoryEventStore


class Faulty(InMemoryEventStore):
    """Fails the appends :meth:`fails` picks, as a store going away does: with ``written``, after
    writing them (the reply was lost), else before (the connection dropped)."""

    written = False

    def fails(self, events: Sequence[NewEvent]) -> bool:
        return False

    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        if not self.fails(events):
            return await super().append(events, expected, tracking)
        if self.written:
            await super().append(events, expected, tracking)
        raise StoreUnavailableError("connection was closed in the middle of operation")
