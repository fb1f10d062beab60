"""Placement decisions: one scheduling cycle on the folded view -> the events of one append.

Pure: ``plan(view, job_ids, config, now, rng)`` runs ``run_cycle`` on a snapshot of the view
(every pending job counts for queue shares and order; only this worker's own ``job_ids`` are
acted on) and maps each intent to events:

* ``Place``: ``JobPlaced`` on the job's stream (expected: the version read, so a job is never
  placed twice) and on the stream of every node it binds (expected: the node's version read, so
  no GPU is ever given twice: if another worker changed one of those nodes first, the append
  fails and the worker re-plans);
* ``Reserve`` / ``Release``: ``JobReserved`` / ``ReservationReleased`` on the job's stream; a
  ``JobReserved`` also on the ``reservations`` stream, expecting the version read, so that two
  workers never reserve one node for two jobs;
* ``Preempt``: ``PreemptionRequested`` on the victim's stream, expecting the version read, so a
  victim is asked once per decision (carrying it out is the preemption service's work);
* ``Resize`` that shrinks (the preempt stage's cheaper alternative to evicting an elastic job):
  ``PreemptionRequested`` with ``resize_to``, carried out like an eviction and ended by
  ``JobResized``;
* ``Resize`` that grows (a running elastic job into idle room): ``JobGrowRequested`` on the job's
  stream and on the stream of every node it adds (expected: the versions read, as for
  ``JobPlaced``), carried out by the preemption service like a shrink (every task checkpoints and
  stops) and ended by ``JobResized`` on the old bindings plus the added ones.

Intents that belong together (a preemptor's reservation and its victims) form one unit; units
are appended in chunks, each unit whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from schemas.events import (
    JobGrowRequested,
    JobPlaced,
    JobReserved,
    PreemptionRequested,
    ReservationReleased,
    TaskBinding,
)
from shared.core.cluster import BoolArray, Placement
from shared.core.cycle import CycleConfig, Place, Preempt, Release, Reserve, Resize, Snapshot, run_cycle
from shared.core.framework import Status
from shared.core.queues import QueueTree
from shared.eventstore import NewEvent
from shared.state.fold import ClusterView
from shared.state.snapshot import SnapshotBuilder
from shared.state.wire import QUEUES_STREAM, RESERVATIONS_STREAM, job_stream, node_stream, quota_stream


@dataclass
class Unit:
    """Events that must be appended together, and the job ids they concern (first: the owner)."""

    jobs: list[str]
    events: list[NewEvent] = field(default_factory=list)
    expected: dict[str, int] = field(default_factory=dict)
    placed: bool = False

    def on_job(self, view: ClusterView, job_id: str, event: object) -> None:
        """``event`` on the job's stream, expecting the version the view read (an earlier
        event of this unit on that stream already set what it expects)."""
        stream = job_stream(job_id)
        self.events.append(_event(stream, event))
        self.expected.setdefault(stream, view.jobs[job_id].version)

    def on_nodes(self, versions: dict[str, int], event: object) -> None:
        """``event`` on each node's stream, expecting the version the decision read."""
        for node in sorted(versions):
            self.events.append(_event(node_stream(node), event))
            self.expected[node_stream(node)] = versions[node]

    def charge(self, view: ClusterView, tree: QueueTree | None, queue: str, event: object) -> None:
        """``event`` adds to ``queue``'s usage: a copy on the quota stream of the queue and of
        every queue above it that has a ``max``, expecting the version the view read, and the
        queue tree expected at the version read.  Two workers that each saw room under a max
        then conflict instead of passing it together (they plan on their own views), and a
        placement planned under a tree since replaced is planned again."""
        self.expected.setdefault(QUEUES_STREAM, view.version(QUEUES_STREAM))
        if tree is None:
            return
        for limiting in tree.limiting(queue):
            self.on_stream(view, quota_stream(limiting), event)

    def on_stream(self, view: ClusterView, stream: str, event: object) -> None:
        """A copy of ``event`` on a stream the view tracks, expecting the version it read."""
        self.events.append(_event(stream, event))
        self.expected.setdefault(stream, view.version(stream))

    def ask(self, view: ClusterView, victim: str, request: PreemptionRequested) -> None:
        """A victim's request (an eviction or a shrink): appended with its preemptor's unit."""
        self.jobs.append(victim)
        self.on_job(view, victim, request)


@dataclass(frozen=True)
class Plan:
    units: list[Unit]
    waiting: dict[str, Status]
    """This worker's jobs the cycle left waiting, in the cycle's order, each with the plugin or
    rule that stopped it (Slurm's REASON column, Kubernetes' ``Unschedulable`` condition)."""
    reserved: dict[str, str] = field(default_factory=dict)
    """Of those, the ones holding a reservation: where, and when they should start."""
    preempt_at: dict[str, float] = field(default_factory=dict)
    """Of those, the ones whose queue's ``preempt-after`` has yet to come and that outrank some
    running work: the moment (epoch seconds) they may preempt lower-priority work anywhere."""

    @property
    def events(self) -> list[NewEvent]:
        return [e for u in self.units for e in u.events]

    @property
    def jobs(self) -> list[str]:
        """Jobs placed by this plan, in plan order."""
        return [u.jobs[0] for u in self.units if u.placed]

    def chunks(self, units_per_chunk: int) -> list[tuple[list[NewEvent], dict[str, int], list[str]]]:
        """(events, expected versions, jobs placed) of consecutive appends of at most
        ``units_per_chunk`` units, in plan order.  A stream an earlier chunk of the same plan
        wrote is expected at the version that chunk leaves behind."""
        out = []
        heads: dict[str, int] = {}
        for start in range(0, len(self.units), units_per_chunk):
            units = self.units[start : start + units_per_chunk]
            events = [e for u in units for e in u.events]
            expected: dict[str, int] = {}
            for u in units:
                for stream, version in u.expected.items():
                    expected.setdefault(stream, heads.get(stream, version))
            for e in events:
                heads[e.stream] = heads.get(e.stream, expected[e.stream]) + 1
            out.append((events, expected, [u.jobs[0] for u in units if u.placed]))
        return out


def shard_mask(names: tuple[str, ...], shard: tuple[int, int] | None) -> BoolArray | None:
    """Nodes whose name hashes to shard ``k`` of ``n`` (``None``: no preference)."""
    if shard is None or shard[1] <= 1:
        return None
    k, n = shard
    return np.array([zlib.crc32(name.encode()) % n == k for name in names], dtype=np.bool_)


def _event(stream: str, event: object) -> NewEvent:
    data = event.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
    return NewEvent(stream, data["type"], data)


def plan(
    view: ClusterView,
    job_ids: Collection[str],
    config: CycleConfig,
    now: float,
    rng: np.random.Generator,
    preferred: BoolArray | None = None,
    builder: SnapshotBuilder | None = None,
) -> Plan:
    snapshot = (builder or SnapshotBuilder()).build(view, now, job_ids, preferred)
    if snapshot is None:
        return Plan([], {})
    cluster = snapshot.cluster
    result = run_cycle(snapshot, config, now, rng)
    units: dict[str, Unit] = {}
    order: list[str] = []

    def unit(owner: str) -> Unit:
        if owner not in units:
            units[owner] = Unit([owner])
            order.append(owner)
        return units[owner]

    def binding(task: int, p: Placement) -> TaskBinding:
        return TaskBinding(
            task=task,
            node=cluster.names[p.node],
            gpus=list(p.gpus),
            gpu_milli=p.task.gpu_milli,
            cpu_milli=p.task.cpu_milli,
            memory_mib=p.task.memory_mib,
        )

    for intent in result.intents:
        if isinstance(intent, Place):
            record = view.jobs[intent.job]
            placements = intent.placements
            nodes = sorted({cluster.names[p.node] for p in placements})
            versions = {n: view.node_version(n) for n in nodes}
            bindings = [binding(i, p) for i, p in enumerate(placements)]
            placed = JobPlaced(
                job_id=intent.job,
                attempt=record.status.attempt,
                bindings=bindings,
                policy=config.profile.name,
                node_versions=versions,
            )
            u = unit(intent.job)
            u.placed = True
            u.on_job(view, intent.job, placed)
            u.on_nodes(versions, placed)
            u.charge(view, snapshot.queues, record.spec.queue, placed)
        elif isinstance(intent, Reserve):
            r = intent.reservation
            event = JobReserved(
                job_id=r.job,
                nodes=[cluster.names[n] for n in r.nodes],
                expected_start=r.expected_start,
                timeout_at=r.timeout_at,
                preemption=r.preemption,
            )
            u = unit(r.job)
            u.on_job(view, r.job, event)
            u.on_stream(view, RESERVATIONS_STREAM, event)
        elif isinstance(intent, Release):
            released = ReservationReleased(
                job_id=intent.job, reason=intent.reason, backoff_until=intent.backoff_until
            )
            unit(intent.job).on_job(view, intent.job, released)
        elif isinstance(intent, Preempt):
            victim = view.jobs[intent.victim]
            request = PreemptionRequested(
                job_id=intent.victim,
                by_job=intent.by,
                grace_s=intent.grace_s,
                reason=intent.reason,
                attempt=victim.status.attempt,
            )
            unit(intent.by).ask(view, intent.victim, request)
        elif isinstance(intent, Resize) and intent.removed and not intent.added:
            # A shrink for a preemptor: carried out by the preemption service like an eviction
            # (every task checkpoints and stops), ended by JobResized on the kept bindings.
            victim = view.jobs[intent.job]
            request = PreemptionRequested(
                job_id=intent.job,
                by_job=intent.by,
                grace_s=config.grace_s,
                reason=f"shrink to {intent.replicas} replicas for {intent.by}",
                attempt=victim.status.attempt,
                resize_to=intent.replicas,
            )
            unit(intent.by).ask(view, intent.job, request)
        elif isinstance(intent, Resize) and intent.added and not intent.removed:
            record = view.jobs[intent.job]
            first = intent.replicas - len(intent.added)  # new replicas are numbered after the old
            added = [binding(first + i, p) for i, p in enumerate(intent.added)]
            nodes = sorted({b.node for b in added})
            versions = {n: view.node_version(n) for n in nodes}
            grow = JobGrowRequested(
                job_id=intent.job,
                attempt=record.status.attempt,
                replicas=intent.replicas,
                added=added,
                grace_s=config.grace_s,
                node_versions=versions,
                reason=f"grow from {first} to {intent.replicas} replicas into idle room",
            )
            u = unit(intent.job)
            u.on_job(view, intent.job, grow)
            u.on_nodes(versions, grow)
            u.charge(view, snapshot.queues, record.spec.queue, grow)
    actionable = snapshot.actionable
    waiting = {
        job: status for job, status in result.unschedulable.items() if actionable is None or job in actionable
    }
    reserved: dict[str, str] = {}
    for job, held in result.reservations.items():
        if job in waiting:
            names = ", ".join(cluster.names[n] for n in held.nodes[:4])
            more = ", ..." if len(held.nodes) > 4 else ""
            start = max(0.0, held.expected_start - now)
            where = f"{len(held.nodes)} node(s) ({names}{more})"
            reserved[job] = f"Reserved: holds {where} as they free; starts in ~{start:.0f} s"
    return Plan([units[o] for o in order], waiting, reserved, preempt_due(snapshot, waiting, now))


def preempt_due(snapshot: Snapshot, waiting: Collection[str], now: float) -> dict[str, float]:
    """When each waiting job's queue's ``preempt-after`` lets it preempt lower-priority work
    anywhere, for the jobs it has not yet and that outrank something running (the others never
    may).  Nothing to do, and nothing spent, where no queue sets ``preempt-after``."""
    tree = snapshot.queues
    if tree is None or not snapshot.running or not any(a is not None for a in tree.preempt_after_s.values()):
        return {}
    lowest = min(r.job.priority for r in snapshot.running)
    due: dict[str, float] = {}
    for job in snapshot.pending:
        at = tree.preempt_at(job.queue, job.since)
        if at is not None and at > now and job.priority > lowest and job.id in waiting:
            due[job.id] = at  # the very moment the core's preemption stage compares with
    return due
