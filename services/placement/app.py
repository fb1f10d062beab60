"""Placement worker: one of any number, sharing ``tessera.placement`` as a consumer group.

Each worker folds all of ``tessera.events`` into its own cluster view and places the pending jobs
whose work items Kafka gave it (the partitions it owns).  One cycle places many jobs and appends
them in one transaction with the versions of every node touched (Omega-style shared state); a
conflict means another worker changed one of those nodes first: the worker waits for its view
to catch up and plans again.  A work item's offset is committed only once its job is no longer
pending, so a worker that dies hands its unplaced jobs to the others on the rebalance.

Running elastic jobs below their size grow into idle room (``Resize`` -> ``JobGrowRequested``):
each is grown by one worker, the one whose ``--shard`` its id hashes to (every worker without
shards; the job stream's expected version lets only one grow it).  A cycle with nothing pending
runs for them only when the view moved, at most every ``TESSERA_GROW_EVERY_S``.

Run: ``python -m services.placement.app --name w1 [--policy tessera]``.  Every few seconds it
writes its counters to ``TESSERA_STATS_DIR/placement-<name>.json`` (placements, conflicts).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import time
import zlib
from collections.abc import Iterator

import numpy as np
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from services.placement.handlers import plan, shard_mask
from services.placement.stats import PlacementStats
from shared.bus.consumer import commit_or_yield
from shared.bus.gather import gather_pause
from shared.core.cluster import BoolArray
from shared.core.cycle import CycleConfig
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Profile
from shared.core.plugins.order.within import order_within
from shared.core.registry import DEFAULT_POLICY, build_profile, check_options
from shared.core.task import TaskShape
from shared.core.workload_watch import Relearning
from shared.eventstore import ConcurrencyError, StoreUnavailableError
from shared.eventstore.postgres import SNAPSHOT_LOCK, PostgresEventStore
from shared.eventstore.retry import until_available
from shared.pause import pause
from shared.service import run_service, service_topics
from shared.settings import Settings
from shared.state.fold import SNAPSHOT_NAME, ClusterView, digest, to_snapshot
from shared.state.follow import (
    EventFollower,
    catch_up_when_available,
    follow_log,
    restore,
    same_log,
)
from shared.state.queue_usage import queue_usage
from shared.state.readiness import mark_ready
from shared.state.snapshot import SnapshotBuilder

log = logging.getLogger("tessera.placement")
QUEUE_METRICS_EVERY = 15
"""Stats rounds (seconds) between two updates of the per-queue gauges (``tessera_queue_*``)."""
RELEARNING_FEED = "relearning"  # the view's change feed of jobs whose shapes ``Relearning`` checks


class WorkItems(ConsumerRebalanceListener):  # type: ignore[misc]
    """Job ids this worker owns, by partition, with the offsets to commit once they are done."""

    def __init__(self) -> None:
        # per partition: (offset, job id, log position of its JobAdmitted, 0 when not known)
        self.items: dict[TopicPartition, list[tuple[int, str, int]]] = {}
        self.consumer: AIOKafkaConsumer | None = None
        self.view: ClusterView | None = None
        self.ready_name = ""

    def add(self, tp: TopicPartition, offset: int, job_id: str, position: int = 0) -> None:
        self.items.setdefault(tp, []).append((offset, job_id, position))

    def owned(self) -> set[str]:
        return {job for items in self.items.values() for _, job, _ in items}

    def done_offsets(self, view: ClusterView) -> dict[TopicPartition, int]:
        """Per partition: the offset after the longest prefix of items whose job left 'pending'
        (an item comes from the job's ``JobAdmitted`` or, after a preemption, its ``JobPreempted``).

        A job the view has not folded yet is not done: the work item (from the placement topic)
        can arrive before its ``JobAdmitted`` (from the event topic); committing it then would
        lose the job for this worker and for the group.  Unless the view is already past the
        item's ``JobAdmitted`` position: then the job is not in this log (an item left on a reused
        topic by another database) and waiting for it would hold the partition's offset forever.
        """
        offsets: dict[TopicPartition, int] = {}
        for tp, items in self.items.items():
            keep = 0
            while keep < len(items):
                _, job_id, position = items[keep]
                job = view.jobs.get(job_id)
                if job is None and position >= 0 and (position == 0 or view.position < position):
                    break  # not folded yet (position -1: another log's item, never ours)
                if job is not None and (job.state == "pending" or view.position < position):
                    break  # still to place, or its requeue (JobPreempted) not folded yet
                keep += 1
            if keep:
                offsets[tp] = items[keep - 1][0] + 1
                self.items[tp] = items[keep:]
        return offsets

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self.consumer is not None and self.view is not None:
            offsets = {tp: o for tp, o in self.done_offsets(self.view).items() if tp in revoked}
            if offsets:
                await commit_or_yield(self.consumer, offsets)
        for tp in revoked:
            self.items.pop(tp, None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.ready_name:
            mark_ready(self.ready_name)


class Worker:
    def __init__(
        self,
        settings: Settings,
        name: str,
        policy: str,
        seed: int = 0,
        max_jobs: int = 200,
        chunk_jobs: int = 50,
        shard: tuple[int, int] | None = None,
    ) -> None:
        check_options(policy, settings.scorer_options)  # a wrong knob stops the worker at start
        self.settings, self.name, self.policy = settings, name, policy
        self.seed, self.max_jobs, self.chunk_jobs = seed, max_jobs, chunk_jobs
        self.shard = shard
        self._preferred: tuple[tuple[str, ...], BoolArray | None] | None = None
        self.view = ClusterView(rotation=zlib.crc32(name.encode()))
        self.stats = PlacementStats()
        self.work = WorkItems()
        self._profile: Profile | None = None
        self._config: CycleConfig | None = None
        self.snapshots = SnapshotBuilder()
        self._relearning = Relearning()
        self._wake = asyncio.Event()
        self._digest: tuple[int, str] = (-1, "")  # (position, digest of the view there)
        self._dumped_at = -1
        self._growable: dict[str, None] = {}  # running elastic jobs below their size, this worker's
        self._grow_at: tuple[int, float] = (-1, 0.0)  # (view position, time) of the last growth cycle

    def profile(self) -> Profile:
        """The policy, relearnt when ``Relearning`` says so: the nodes changed, as many new jobs
        came as three times those it learnt from, or a pending job needs nodes that no job learnt
        from needs.  A rebuild drops the scorer's caches, so it must stay rare."""
        cluster = self.view.cluster
        assert cluster is not None
        jobs = self.view.admitted
        why = self._relearning.due(cluster.names, jobs, self._new_pending_shapes())
        if self._profile is None or why is not None:
            shapes = [j.shape for j in self.view.jobs.values()]
            if not shapes:
                raise RuntimeError("no jobs to learn the workload from")
            self._profile = build_profile(
                self.policy, TypicalWorkload.from_tasks(shapes), self.settings.scorer_options
            )
            self._relearning.learnt(cluster, jobs, shapes)
            known, size = len(shapes), cluster.size
            log.info("policy %s learnt from %d jobs on %d nodes (%s)", self.policy, known, size, why)
        return self._profile

    def _new_pending_shapes(self) -> Iterator[TaskShape]:
        """The shapes of the pending jobs that changed since the last call (every pending job's,
        the first time on a view): a cycle looks at what arrived, not at the whole backlog."""
        view = self.view
        if view.subscribed(RELEARNING_FEED):
            changed = view.drain_feed(RELEARNING_FEED)
        else:
            view.subscribe(RELEARNING_FEED)
            changed = list(view.pending_ids())
        pending = view.pending_ids()
        return (view.jobs[j].shape for j in changed if j in pending)

    def config(self) -> CycleConfig:
        """The cycle as the live workers run it: every stage, elastic growth and shrink
        included (the preemption service and the agents carry resizes out)."""
        profile = self.profile()
        if self._config is None or self._config.profile is not profile:
            self._config = CycleConfig(
                profile,
                max_jobs=self.max_jobs,
                grace_s=self.settings.preempt_grace_s,
                min_runtime_s=self.settings.preempt_min_runtime_s,
                restart_overhead_s=self.settings.preempt_restart_overhead_s,
                max_preemptions=self.settings.preempt_max_per_job,
                consolidate=self.settings.consolidate,
                spare_scarce_homes=self.settings.spare_scarce_homes,
                order=order_within(self.settings.order_within, self.settings.requeue_timestamp),
            )
        return self._config

    def growable(self) -> list[str]:
        """Running checkpointable elastic jobs below their size that this worker grows, kept
        from the jobs the view changed since the last call (not a scan of every active job)."""
        for job_id in self.view.drain_changed():
            record = self.view.jobs.get(job_id)
            mine = self.shard is None or self.shard[1] <= 1
            if not mine and self.shard is not None:
                mine = zlib.crc32(job_id.encode()) % self.shard[1] == self.shard[0]
            grows = (
                mine
                and record is not None
                and record.state in ("placed", "running")
                and record.spec.elastic is not None
                and record.spec.checkpointable
                and len(record.bindings) < record.spec.max_replicas
            )
            if grows:
                self._growable[job_id] = None
            else:
                self._growable.pop(job_id, None)
        return list(self._growable)

    def _grow_due(self) -> bool:
        """A cycle for growth alone: only once the view moved (room may have freed), at most
        every ``grow_every_s`` (a setting)."""
        position, at = self._grow_at
        return self.view.position != position and time.monotonic() - at >= self.settings.grow_every_s

    def preferred(self) -> BoolArray | None:
        """This worker's share of the nodes (tried first), recomputed when the nodes change."""
        cluster = self.view.cluster
        if cluster is None:
            return None
        if self._preferred is None or self._preferred[0] != cluster.names:
            self._preferred = (cluster.names, shard_mask(cluster.names, self.shard))
        return self._preferred[1]

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        await service_topics(s)
        store = await PostgresEventStore.connect(s.database_url, max_size=4, wait_s=s.start_wait_s)
        restored_at = time.time()
        self.view = await restore(store, self.view.rotation, s.keep_ended_jobs)  # snapshot plus tail
        follower = await follow_log(self.view, store, s, restored_at)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap_servers,
            group_id=f"{s.topic_prefix}-placement",
            client_id=f"placement-{self.name}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            max_poll_interval_ms=s.kafka_max_poll_interval_ms,
        )
        self.work.consumer, self.work.view = consumer, self.view
        self.work.ready_name = f"placement-{self.name}"
        consumer.subscribe([s.topics.placement], listener=self.work)
        await consumer.start()
        tasks = [
            asyncio.create_task(follower.run(stop)),
            asyncio.create_task(self._take_work(consumer, follower.log_id, stop)),
            asyncio.create_task(self._write_stats(stop)),
            asyncio.create_task(self._snapshots(store, stop)),
        ]
        try:
            await self._place(store, follower, consumer, stop)
        except StoreUnavailableError:
            if not stop.is_set():
                raise
            # stopped while PostgreSQL was away: what was not written is placed after a restart
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await consumer.stop()
            await store.close()
            self._dump_stats(final=True)

    async def _take_work(self, consumer: AIOKafkaConsumer, log_id: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200, max_records=1000)
            for tp, records in batch.items():
                for r in records:
                    headers = dict(r.headers)
                    if same_log(headers, log_id):  # the relay put its JobAdmitted's position there
                        job = r.key.decode() if r.key else ""
                        self.work.add(tp, r.offset, job, int(headers.get("position", 0)))
                    else:  # another log's work item: nothing to place, nothing to hold back
                        self.work.add(tp, r.offset, "", -1)
            if batch:
                self._wake.set()
            await gather_pause(bool(batch), self.settings.gather_ms)

    async def _place(
        self,
        store: PostgresEventStore,
        follower: EventFollower,
        consumer: AIOKafkaConsumer,
        stop: asyncio.Event,
    ) -> None:
        while not stop.is_set():
            offsets = self.work.done_offsets(self.view)
            if offsets:
                await commit_or_yield(consumer, offsets)
            owned = self.work.owned()
            pending = [j for j in self.view.pending() if j.spec.id in owned] if self.view.cluster else []
            growable = self.growable() if self.view.cluster else []
            if not pending and not (growable and self._grow_due()):
                if self.stats.waiting_count:
                    self.stats.waiting({}, {})  # nothing of this worker's waits any more
                await self._sleep_until_change(follower, 0.5)
                continue
            if growable:
                self._grow_at = (self.view.position, time.monotonic())
            rng = np.random.default_rng([self.seed, self.view.position])
            t0 = time.perf_counter()
            try:
                config = self.config()
                actionable = owned | set(growable)
                decision = plan(
                    self.view, actionable, config, time.time(), rng, self.preferred(), self.snapshots
                )
            except Exception:  # a bug must not take the worker down: log, refresh, go on
                log.exception("planning failed; refreshing the view")
                self._profile = None
                await catch_up_when_available(self.view, store, stop)
                await asyncio.sleep(0.5)
                continue
            t1 = time.perf_counter()
            self.stats.cycle(t1 - t0, len(self.view.pending_ids()))
            self.stats.waiting(decision.waiting, decision.reserved, decision.preempt_at)
            if not decision.events:
                await self._sleep_until_change(follower, 0.5)  # nothing fits: wait for resources
                continue
            # Append in chunks of jobs: a conflict then wastes one chunk's plan, not the cycle's.
            conflicted = False
            for events, expected, placed in decision.chunks(self.chunk_jobs):
                try:
                    # While PostgreSQL is away the chunk waits and is tried again as it is: its
                    # expected versions make a retry of an append that was written (its reply
                    # lost) a conflict, never a second placement.
                    recorded = await until_available(
                        functools.partial(store.append, events, expected), "placing", stop=stop
                    )
                except ConcurrencyError as exc:
                    self.stats.conflict()
                    log.info("conflict on %s", dict(list(exc.conflicts.items())[:3]))
                    conflicted = True
                    break  # the rest was planned on top of this chunk: re-plan it
                # Our own placements count at once; the log brings them back later, skipped.
                self.view.apply_ahead(recorded)
                now = time.time()
                self.stats.placed((now - self.view.jobs[job].admitted_time for job in placed), events)
            t2 = time.perf_counter()
            self.stats.spent("append", t2 - t1)
            if conflicted:  # another writer moved a node we used: see what it did before planning again
                await catch_up_when_available(self.view, store, stop)
            self.stats.spent("catch_up", time.perf_counter() - t2)

    async def _sleep_until_change(self, follower: EventFollower, timeout: float) -> None:
        follower.changed.clear()
        self._wake.clear()
        waits = [asyncio.create_task(follower.changed.wait()), asyncio.create_task(self._wake.wait())]
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()

    async def _snapshots(self, store: PostgresEventStore, stop: asyncio.Event, every_s: float = 5.0) -> None:
        """Keep the newest snapshot of the view no more than ``snapshot_every`` events old.

        Restarts then replay at most that many events (tens of thousands a second).  Serialising
        the view holds the worker up (tens of ms per thousand jobs), so it is done rarely, and
        only by one worker when several find the newest snapshot old at once.
        """
        while not await pause(stop, every_s):
            try:
                await self._snapshot_if_due(store)
            except StoreUnavailableError as exc:  # PostgreSQL is away: the next round tries again
                log.warning("snapshot skipped: %s", exc)

    async def _snapshot_if_due(self, store: PostgresEventStore) -> None:
        every = self.settings.snapshot_every
        if self.view.position - every < await store.snapshot_position(SNAPSHOT_NAME):
            return
        async with store.exclusive(SNAPSHOT_LOCK) as mine:
            # Look again under the lock: another worker may have saved one meanwhile.
            if not mine or self.view.position - every < await store.snapshot_position(SNAPSHOT_NAME):
                return
            if self.view.folded_ahead:
                return  # own placements not yet back from the log: the view is not a log prefix
            t0 = time.perf_counter()
            body = to_snapshot(self.view)  # in the loop: the view must not move while it is read
            t1 = time.perf_counter()
            await store.save_snapshot(SNAPSHOT_NAME, int(body["position"]), body)
            log.info(
                "snapshot at %d: %.0f ms reading the view, %.0f ms encoding and saving (off the loop)",
                body["position"],
                1000 * (t1 - t0),
                1000 * (time.perf_counter() - t1),
            )

    async def _write_stats(self, stop: asyncio.Event) -> None:
        rounds = 0
        while not await pause(stop, 1.0):
            self._dump_stats()
            if rounds % QUEUE_METRICS_EVERY == 0:
                # Every few seconds, not each: it reads every pending and active job.
                self.stats.queues(queue_usage(self.view))
            rounds += 1

    def _dump_stats(self, final: bool = False) -> None:
        folder = self.settings.stats_dir
        folder.mkdir(parents=True, exist_ok=True)
        # The digest hashes the whole view (tens of ms on a big cluster): it is taken only once the
        # view has been still for a whole stats period, so a busy worker never pays it per second.
        position = self.view.position
        still = final or position == self._dumped_at
        if still and not self.view.folded_ahead and self._digest[0] != position:
            self._digest = (position, digest(self.view))
        self._dumped_at = position
        body = {
            "worker": self.name,
            **self.stats.report(),
            "folded": position,
            "position": self._digest[0],  # where ``digest`` was taken
            "digest": self._digest[1],
        }
        tmp = folder / f"placement-{self.name}.json.tmp"
        tmp.write_text(json.dumps(body))
        tmp.replace(folder / f"placement-{self.name}.json")


def main() -> None:
    parser = argparse.ArgumentParser(description="Tessera placement worker")
    parser.add_argument("--name", default=f"w{os.getpid()}")
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-jobs", type=int, default=200, help="jobs planned per cycle")
    parser.add_argument("--chunk-jobs", type=int, default=50, help="jobs per append (one transaction)")
    parser.add_argument(
        "--shard", default="", help="K/N: prefer the nodes of share K of N (one per worker; fewer conflicts)"
    )
    args = parser.parse_args()
    shard = tuple(int(x) for x in args.shard.split("/")) if args.shard else None
    try:
        worker = Worker(
            Settings(),
            args.name,
            args.policy,
            args.seed,
            args.max_jobs,
            args.chunk_jobs,
            shard,  # type: ignore[arg-type]
        )
    except ValueError as exc:  # an unknown policy or a wrong scorer option: one line, not a traceback
        parser.exit(2, f"placement: {exc}\n")
    run_service(worker.run)


if __name__ == "__main__":
    main()
