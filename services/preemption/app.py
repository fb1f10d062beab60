"""Preemption service: carries out evictions (preemption, drain, lost nodes) and keeps node leases.

It folds the event log like every service and reads the agents' heartbeats from
``tessera.heartbeats``; each time the view moves (or every ``TICK_S``, since leases and deadlines
expire on their own) it asks :func:`services.preemption.handlers.decide` what is due and appends
each step with the versions it read.  It holds no state of its own: a restarted service folds the
log again and every eviction in flight resumes where the log says it is (a step another instance
or an earlier life already took fails its expected version and is skipped).

Until it has heard from a node, the service counts the node as heard at its own start: a restart
of the service does not declare every node lost.

Run: ``python -m services.preemption.app``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from schemas.node import NodeHeartbeat
from services.preemption.handlers import Knobs, Step, Watch, decide
from shared import metrics
from shared.eventstore import ConcurrencyError
from shared.eventstore.postgres import PostgresEventStore
from shared.service import run_service, service_topics
from shared.settings import Settings
from shared.state.fold import ClusterView
from shared.state.follow import catch_up_when_available, follow_log, restore
from shared.state.readiness import mark_ready

log = logging.getLogger("tessera.preemption")
TICK_S = 0.25
PROBE_S = 1.0  # how often the heartbeat listener checks that Kafka answers
PROBE_TIMEOUT_S = 2.0
BATCH_STEPS = 200  # steps per append at most (one transaction stays short)


class Leases(Mapping[str, float]):
    """When each node's agent was last heard, on this process's clock.

    A lease ages only while the heartbeat topic can be reached: while Kafka is out of reach no
    agent can be heard, and counting that silence against the nodes would declare every node
    lost and evict every running job (a Kafka restart of half a minute would do it; the
    Kubernetes node controller stops evicting in a full disruption for the same reason).  So
    every node counts as heard whenever a probe finds the topic unreachable, and once more when
    it is reached again (their next beats take up to a heartbeat period to arrive)."""

    def __init__(self, since: float) -> None:
        self.since = since  # nodes not heard yet count as heard at the service's start
        self.heard: dict[str, float] = {}
        self.bus_up = True

    def renew(self, beat: NodeHeartbeat, at: float) -> None:
        for node in beat.nodes:
            self.heard[node] = at

    def bus(self, at: float, reachable: bool) -> None:
        """Note whether a probe at ``at`` reached the heartbeat topic (see the class)."""
        if not reachable or not self.bus_up:
            self.since = max(self.since, at)
            for node in self.heard:
                self.heard[node] = max(self.heard[node], at)
        if reachable != self.bus_up:
            log.warning(
                "heartbeat topic %s: leases %s",
                "reached again" if reachable else "out of reach",
                "run again from now" if reachable else "held",
            )
        self.bus_up = reachable

    def __getitem__(self, node: str) -> float:
        """When ``node`` was last heard; the service's start for one never heard (so never a
        KeyError: ``get`` answers the same)."""
        return self.heard.get(node, self.since)

    def __iter__(self) -> Iterator[str]:
        return iter(self.heard)

    def __len__(self) -> int:
        return len(self.heard)


def knobs(settings: Settings) -> Knobs:
    return Knobs(
        lease_s=settings.lease_s,
        requeue_after_s=settings.requeue_after_s,
        stop_report_s=settings.stop_report_s,
        grace_s=settings.preempt_grace_s,
        signal=settings.stop_signal,
    )


async def listen(settings: Settings, leases: Leases, stop: asyncio.Event) -> None:
    """Renew leases from the heartbeat topic, from its end (old beats say nothing of now)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topics.heartbeats, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        probed = 0.0
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200, max_records=1000)
            now = time.time()
            for records in batch.values():
                for record in records:
                    try:
                        leases.renew(NodeHeartbeat.model_validate_json(record.value or b""), now)
                    except ValidationError:
                        log.warning("not a heartbeat at offset %d", record.offset)
            if now - probed >= PROBE_S:  # an empty poll does not say whether Kafka answered
                probed = now
                leases.bus(time.time(), await _reachable(consumer, tp))
    finally:
        await consumer.stop()


async def _reachable(consumer: AIOKafkaConsumer, tp: TopicPartition) -> bool:
    """Whether the broker answers for the heartbeat topic now (its end offset, within a bound)."""
    try:
        await asyncio.wait_for(consumer.end_offsets([tp]), PROBE_TIMEOUT_S)
    except (KafkaError, TimeoutError, OSError):
        return False
    return True


async def act(store: PostgresEventStore, view: ClusterView, leases: Leases, k: Knobs, watch: Watch) -> int:
    """Append every step due now; returns how many were taken.

    The steps of one call touch distinct streams (one step per job, per node), so they go in
    one append, checked together: one round trip for a hundred evictions instead of a hundred
    (the appends are serialised by the store's lock, so their count is what costs).  If any
    stream moved meanwhile the batch fails whole and the steps are retried one by one, each
    skipped if its own stream moved."""
    steps = decide(view, time.time(), leases, k, watch)
    taken = 0
    for start in range(0, len(steps), BATCH_STEPS):
        batch = steps[start : start + BATCH_STEPS]
        expected = {s: v for step in batch for s, v in step.expected.items()}
        try:
            recorded = await store.append([e for step in batch for e in step.events], expected)
        except ConcurrencyError:
            taken += await _one_by_one(store, view, batch)
            continue
        view.apply_ahead(recorded)  # the next decide sees it at once
        taken += len(batch)
        for step in batch:
            _taken(step)
    return taken


def _taken(step: Step) -> None:
    log.info("%s", step.what)
    for kind in {e.type for e in step.events}:  # one step writes an event to several streams
        metrics.PREEMPTION_EVENTS.labels(kind).inc()


async def _one_by_one(store: PostgresEventStore, view: ClusterView, steps: list[Step]) -> int:
    taken = 0
    for step in steps:
        try:
            recorded = await store.append(step.events, step.expected)
        except ConcurrencyError:
            log.debug("skipped (the stream moved): %s", step.what)
            continue
        view.apply_ahead(recorded)
        taken += 1
        _taken(step)
    return taken


async def run(stop: asyncio.Event, settings: Settings | None = None) -> None:
    settings = settings or Settings()
    await service_topics(settings)
    store = await PostgresEventStore.connect(settings.database_url, max_size=2, wait_s=settings.start_wait_s)
    leases = Leases(time.time())
    restored_at = time.time()
    view = await restore(store, keep_ended=settings.keep_ended_jobs)
    follower = await follow_log(view, store, settings, restored_at)
    tasks = [
        asyncio.create_task(follower.run(stop)),
        asyncio.create_task(listen(settings, leases, stop)),
    ]
    mark_ready(settings.service_name or "preemption")
    k = knobs(settings)
    watch = Watch()
    try:
        while not stop.is_set():
            follower.changed.clear()
            try:
                if await act(store, view, leases, k, watch):
                    continue  # look again at once: one step often makes the next one due
            except OSError as exc:  # PostgreSQL restarting or down (StoreUnavailableError)
                log.warning("event store unreachable (%s); waiting for it", exc)
                # A step written before the connection dropped is in the log but not in the view:
                # catch up before deciding again (the steps' expected versions make a step
                # decided on a stale view conflict instead of repeating).
                with contextlib.suppress(OSError):  # stopping while the store is away
                    await catch_up_when_available(view, store, stop)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(follower.changed.wait(), TICK_S)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await store.close()


def main() -> None:
    run_service(run)


if __name__ == "__main__":
    main()
