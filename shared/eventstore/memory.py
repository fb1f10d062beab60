"""In-memory adapter of the event-store port, for unit tests and the simulator."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shared.eventstore.port import NO_STREAM, EventStore, NewEvent, RecordedEvent, check_expected


class InMemoryEventStore(EventStore):
    def __init__(self) -> None:
        self._events: list[RecordedEvent] = []
        self._versions: dict[str, int] = {}
        self._snapshots: dict[str, tuple[int, dict[str, Any]]] = {}
        self._tracking: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._log_id = uuid.uuid4().hex

    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        async with self._lock:
            check_expected(expected, self._versions, {e.stream for e in events})
            versions = dict(self._versions)
            now = datetime.now(UTC)
            recorded = []
            for i, event in enumerate(events):
                versions[event.stream] = versions.get(event.stream, NO_STREAM) + 1
                recorded.append(
                    RecordedEvent(
                        position=len(self._events) + i + 1,
                        stream=event.stream,
                        version=versions[event.stream],
                        type=event.type,
                        data=copy.deepcopy(dict(event.data)),
                        metadata=copy.deepcopy(dict(event.metadata)),
                        recorded_at=now,
                    )
                )
            self._events.extend(recorded)
            self._versions = versions
            if tracking is not None:
                self._tracking[tracking[0]] = tracking[1]
            return recorded

    async def stream_version(self, stream: str) -> int:
        return self._versions.get(stream, NO_STREAM)

    async def read_stream(self, stream: str, after_version: int = 0) -> list[RecordedEvent]:
        return [e for e in self._events if e.stream == stream and e.version > after_version]

    async def read_streams(
        self, streams: Collection[str], up_to_version: int | None = None
    ) -> dict[str, list[RecordedEvent]]:
        wanted = set(streams)
        out: dict[str, list[RecordedEvent]] = {}
        for e in self._events:
            if e.stream in wanted and (up_to_version is None or e.version <= up_to_version):
                out.setdefault(e.stream, []).append(e)
        return out

    async def read_all(
        self, after_position: int = 0, limit: int = 1000, types: Collection[str] | None = None
    ) -> list[RecordedEvent]:
        if types is None:
            return self._events[after_position : after_position + limit]
        kinds = set(types)
        return [e for e in self._events[after_position:] if e.type in kinds][:limit]

    async def last_position(self) -> int:
        return len(self._events)

    async def save_snapshot(self, name: str, position: int, state: Mapping[str, Any]) -> None:
        current = self._snapshots.get(name)
        if current is None or current[0] <= position:  # never replace a newer snapshot
            self._snapshots[name] = (position, copy.deepcopy(dict(state)))

    async def load_snapshot(self, name: str) -> tuple[int, dict[str, Any]] | None:
        found = self._snapshots.get(name)
        return (found[0], copy.deepcopy(found[1])) if found else None

    async def snapshot_position(self, name: str) -> int:
        found = self._snapshots.get(name)
        return found[0] if found else 0

    async def log_id(self) -> str:
        return self._log_id

    async def tracked_position(self, consumer: str) -> int:
        return self._tracking.get(consumer, 0)

    async def track(self, consumer: str, position: int) -> None:
        self._tracking[consumer] = position
