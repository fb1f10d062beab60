"""Topic names and their creation on start.

``tessera.events`` has a single partition on purpose: it is the event log's total order, and
every placement worker folds all of it.  The command topics are keyed by job id and partitioned
(``TESSERA_TOPIC_PARTITIONS``) so a consumer group can share them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

SUBMISSIONS = "tessera.submissions"
EVENTS = "tessera.events"
DEADLETTER = "tessera.deadletter"
TELEMETRY = "tessera.telemetry"
PLACEMENT = "tessera.placement"
"""Work items for placement workers: every JobAdmitted, keyed by job id (the relay writes them)."""


@dataclass(frozen=True)
class TopicNames:
    """The topic names under one prefix (``TESSERA_TOPIC_PREFIX``), so stacks can share a broker."""

    prefix: str = "tessera"

    @property
    def submissions(self) -> str:
        return f"{self.prefix}.submissions"

    @property
    def events(self) -> str:
        return f"{self.prefix}.events"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def telemetry(self) -> str:
        return f"{self.prefix}.telemetry"

    @property
    def placement(self) -> str:
        return f"{self.prefix}.placement"

    @property
    def heartbeats(self) -> str:
        """Agents' lease renewals (``NodeHeartbeat``); one partition: the one reader reads all."""
        return f"{self.prefix}.heartbeats"


def topic_layout(partitions: int, names: TopicNames | None = None) -> dict[str, int]:
    n = names or TopicNames()
    return {
        n.submissions: partitions,
        n.events: 1,
        n.deadletter: 1,
        n.telemetry: partitions,
        n.placement: partitions,
        n.heartbeats: 1,
    }


@contextlib.asynccontextmanager
async def _admin(bootstrap: str, wait_s: float = 0.0) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client, trying to reach the broker for up to ``wait_s`` (0: one try)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            await admin.start()
            break
        except KafkaConnectionError:
            if time.monotonic() + 0.5 > deadline:
                raise
            await asyncio.sleep(0.5)
    try:
        yield admin
    finally:
        await admin.close()


async def ensure_topics(
    bootstrap: str,
    partitions: int = 8,
    extra: dict[str, int] | None = None,
    names: TopicNames | None = None,
    wait_s: float = 30.0,
) -> None:
    """Create the topics that do not exist yet (idempotent).  Waits up to ``wait_s`` for the
    broker to answer: a service may start before Kafka does; a CLI command passes less."""
    layout = {**topic_layout(partitions, names), **(extra or {})}
    async with _admin(bootstrap, wait_s) as admin:
        existing = set(await admin.list_topics())
        missing = [NewTopic(name, n, 1) for name, n in layout.items() if name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another process created it first
                await admin.create_topics(missing)
        for _ in range(100):  # metadata propagates asynchronously
            if set(layout) <= set(await admin.list_topics()):
                return
            await asyncio.sleep(0.1)


async def delete_topics(bootstrap: str, which: TopicNames | Callable[[str], bool]) -> list[str]:
    """Delete the topics of one prefix (or those ``which`` picks by name) that exist; returns
    their names.  Tests and benchmarks run each on a prefix of their own and delete it
    afterwards, and a demo the earlier demos' topics: a broker left with thousands of partitions
    from old runs takes about a minute to start again after a crash (measured: 9,875 partition
    folders, 49 s; 13.5 s with none), and fills the disk."""
    if isinstance(which, TopicNames):
        own = set(topic_layout(1, which))
        picks: Callable[[str], bool] = own.__contains__
    else:
        picks = which
    async with _admin(bootstrap) as admin:
        doomed = sorted(name for name in await admin.list_topics() if picks(name))
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
