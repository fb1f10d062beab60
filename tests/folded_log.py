"""A log of events folded into one view as they are appended: the services' pure handlers are
tested against it without a store (versions and positions as the store would give them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from shared.eventstore import NewEvent
from shared.eventstore.port import RecordedEvent
from shared.state.fold import ClusterView

T0 = 1_000_000.0


class Step(Protocol):
    """Events meant to be appended together, each stream expected at a version."""

    @property
    def events(self) -> Sequence[NewEvent]: ...

    @property
    def expected(self) -> Mapping[str, int]: ...


class Log:
    """Events appended in order, folded into one view as they come."""

    def __init__(self) -> None:
        self.view = ClusterView()
        self.versions: dict[str, int] = {}
        self.position = 0
        self.clock = T0

    def add(self, stream: str, event: Any) -> None:
        data = event.model_dump(mode="json", by_alias=True)
        self.append_raw(stream, data)

    def append_raw(self, stream: str, data: Mapping[str, Any]) -> None:
        self.position += 1
        self.versions[stream] = self.versions.get(stream, 0) + 1
        at = datetime.fromtimestamp(self.clock, UTC)
        self.view.apply(
            RecordedEvent(self.position, stream, self.versions[stream], data["type"], data, {}, at)
        )

    def take(self, steps: Sequence[Step]) -> None:
        """Append the steps whose expected versions still hold (as the store would)."""
        for step in steps:
            if all(self.versions.get(s, 0) == v for s, v in step.expected.items()):
                for e in step.events:
                    self.append_raw(e.stream, e.data)
