"""The event-store port: what every adapter (PostgreSQL, in-memory) promises.

Contracts:

* ``append`` writes all its events in one transaction or none.  Every stream it touches must be
  named in ``expected`` with the version the caller read (``NO_STREAM`` = must not exist yet,
  ``ANY_VERSION`` = do not check); if any stream moved, nothing is written and
  :class:`ConcurrencyError` names the streams.  Versions within a stream start at 1 and have no gaps.
* Global positions increase in commit order: once position p is visible, every position below p
  that will ever be visible already is.  (Positions may have gaps; a gap is never filled.)
* ``tracking``, when given, records "consumer C processed up to position P" in the same transaction
  as the events, so a consumer's effects and its progress cannot disagree after a crash.
* Events are never updated or deleted.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

NO_STREAM = 0
ANY_VERSION = -1


@dataclass(frozen=True, slots=True)
class NewEvent:
    stream: str
    type: str
    data: Mapping[str, Any]
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    position: int
    stream: str
    version: int
    type: str
    data: Mapping[str, Any]
    metadata: Mapping[str, Any]
    recorded_at: datetime


class ConcurrencyError(Exception):
    """Another writer moved a stream since the caller read it."""

    def __init__(self, conflicts: Mapping[str, tuple[int, int]]) -> None:
        detail = ", ".join(f"{s}: expected {e}, found {a}" for s, (e, a) in sorted(conflicts.items()))
        super().__init__(f"concurrent append: {detail}")
        self.conflicts = dict(conflicts)


class StoreUnavailableError(ConnectionError):
    """The store could not be reached, or lost the connection during the call (a restart, a
    crash, a network fault): transient, so retry.  An ``append`` that raised it may or may not
    have been written; retrying it with the same expected versions is safe (it then conflicts
    if it was).  An ``OSError``, so code that rides out network faults rides this out too; each
    adapter turns its driver's own connection errors into it, so services need not know the
    adapter."""


class EventStore(abc.ABC):
    """An append-only, multi-stream event log with optimistic concurrency."""

    @abc.abstractmethod
    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        """Append ``events`` atomically if every stream is at its expected version."""

    @abc.abstractmethod
    async def stream_version(self, stream: str) -> int:
        """The stream's last version (``NO_STREAM`` if it has none)."""

    @abc.abstractmethod
    async def read_stream(self, stream: str, after_version: int = 0) -> list[RecordedEvent]:
        """The stream's events with version > ``after_version``, in version order."""

    @abc.abstractmethod
    async def read_streams(
        self, streams: Collection[str], up_to_version: int | None = None
    ) -> dict[str, list[RecordedEvent]]:
        """The events of each of ``streams`` that has any (up to ``up_to_version`` each), in
        version order; a stream with no events is absent.  One round trip for many streams."""

    @abc.abstractmethod
    async def read_all(
        self, after_position: int = 0, limit: int = 1000, types: Collection[str] | None = None
    ) -> list[RecordedEvent]:
        """Up to ``limit`` events with position > ``after_position``, in position order; only
        those of the given ``types`` when named (a reader that needs few kinds skips the rest)."""

    @abc.abstractmethod
    async def last_position(self) -> int:
        """The highest visible position (0 when empty)."""

    @abc.abstractmethod
    async def save_snapshot(self, name: str, position: int, state: Mapping[str, Any]) -> None:
        """Keep folded ``state`` as of ``position`` under ``name``; a newer snapshot is never replaced."""

    @abc.abstractmethod
    async def load_snapshot(self, name: str) -> tuple[int, dict[str, Any]] | None:
        """The latest snapshot under ``name``: (position, state), or None."""

    @abc.abstractmethod
    async def snapshot_position(self, name: str) -> int:
        """The position of the latest snapshot under ``name`` (0 if none), without loading it."""

    @abc.abstractmethod
    async def log_id(self) -> str:
        """This log's identity: drawn once when the store is created, never changed."""

    @abc.abstractmethod
    async def tracked_position(self, consumer: str) -> int:
        """Where ``consumer`` last recorded its progress (0 if never)."""

    @abc.abstractmethod
    async def track(self, consumer: str, position: int) -> None:
        """Record progress on its own (when there are no events to append)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def check_named(expected: Mapping[str, int], streams: set[str]) -> None:
    """Raise ``ValueError`` unless every touched stream has an expected version (a caller's bug)."""
    missing = streams - set(expected)
    if missing:
        raise ValueError(f"append touches streams without an expected version: {sorted(missing)}")


def check_expected(expected: Mapping[str, int], actual: Mapping[str, int], streams: set[str]) -> None:
    """Raise :class:`ConcurrencyError` unless every touched stream is named and at its version."""
    check_named(expected, streams)
    conflicts = {
        s: (e, actual.get(s, NO_STREAM))
        for s, e in expected.items()
        if e != ANY_VERSION and actual.get(s, NO_STREAM) != e
    }
    if conflicts:
        raise ConcurrencyError(conflicts)
