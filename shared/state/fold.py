"""The fold of the event log into the cluster state: nodes, their free resources, jobs.

``ClusterView.apply`` takes recorded events in log order and is idempotent (an event at or below
the last folded position is ignored), so duplicates from the relay are harmless and replaying the
log from position 0 rebuilds exactly the state the services hold.  Events that appear on several
streams in one append (``JobPlaced`` on the job stream and on every node stream it binds) change
the state once, from the job stream's copy; the copies only advance the node streams' versions,
which placement sends back as its expected versions.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from schemas.events import (
    JobAdmitted,
    JobGrowRequested,
    JobPlaced,
    JobResized,
    NodeRegistered,
    QueuesApplied,
    TaskBinding,
)
from schemas.job import JobSpec
from schemas.node import NodeInventory
from schemas.queues import QueueTreeSpec
from shared.core.cluster import ClusterState, Placement
from shared.core.jobs import RuntimeEstimator
from shared.core.lifecycle import ACTIVE, ADMITTED, TASK_EVENTS, TERMINAL, JobStatus, Phase, evolve
from shared.core.priority import class_value
from shared.core.task import TaskShape
from shared.eventstore.port import RecordedEvent
from shared.state.wire import QUEUES_STREAM, RESERVATIONS_STREAM, core_job, node_spec, node_stream, task_shape

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "ClusterView",
    "JobRecord",
    "JobState",
    "NodeCondition",
    "digest",
    "fold",
    "job_state",
]

JobState = Literal["pending", "placed", "running", "preempting", "finished", "failed", "cancelled"]


@dataclass
class JobRecord:
    spec: JobSpec
    admitted_at: int  # log position of JobAdmitted
    admitted_time: float = 0.0  # epoch seconds JobAdmitted was recorded
    status: JobStatus = ADMITTED
    bindings: list[TaskBinding] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)  # task -> start time (epoch s, from the log)
    done: dict[int, str] = field(default_factory=dict)  # task -> finished | failed
    placed_at: int | None = None
    version: int = 0  # the job stream's version
    queued_time: float = 0.0  # epoch seconds it last became pending (admission or preemption)
    placed_time: float = 0.0  # epoch seconds of its current placement
    attained_gpu_s: float = 0.0  # GPU-seconds received by ended attempts
    reservation: dict[str, Any] | None = None  # the last JobReserved's body, until released or placed
    backoff_until: float = 0.0
    preempted_by: str = ""
    request: dict[str, Any] | None = None  # the current attempt's PreemptionRequested body
    eviction: dict[str, Any] | None = None  # the current attempt's EvictionStarted body
    stops: dict[int, dict[str, Any]] = field(default_factory=dict)  # task -> its TaskStopped body
    resume: bool = False  # the last attempt ended checkpointed: the next one resumes from it
    kept_s: float = 0.0  # run time kept in checkpoints across attempts (simulated agents resume there)
    growing: list[TaskBinding] = field(default_factory=list)  # room a grow in flight took (JobGrowRequested)
    cancelling: str | None = None  # a CancelRequested's reason: stopping, then JobCancelled
    promoted_class: str | None = None  # the class its queue's large-jobs rule raised it to
    priority: int = field(init=False)
    """The priority the scheduler compares: the spec's, or the class admission raised it to
    (worked out once: the pending order reads it for every pending job)."""

    def __post_init__(self) -> None:
        own = self.spec.effective_priority
        self.priority = own if self.promoted_class is None else max(own, class_value(self.promoted_class))

    @property
    def state(self) -> JobState:
        return self.status.phase.value

    @cached_property
    def shape(self) -> TaskShape:
        """One replica in core units (worked out once: the spec never changes)."""
        return task_shape(self.spec)

    @property
    def activity(self) -> str:
        """The state as an operator reads it: a cancel or a resize in flight says so."""
        if self.cancelling is not None and self.status.active:
            return "cancelling"
        if self.status.phase != Phase.PREEMPTING:
            return self.state
        request = self.eviction or self.request or {}
        if self._grows(request):
            return f"growing {len(self.bindings)}->{len(self.bindings) + len(self.growing)}"
        resize_to = request.get("resize_to")
        if resize_to is not None:
            return f"shrinking {len(self.bindings)}->{resize_to}"
        return self.state

    def _grows(self, request: dict[str, Any]) -> bool:
        return bool(self.growing) or request.get("type") == "JobGrowRequested"

    def leaving(self, holds: int) -> int:
        """Of the ``holds`` tasks the job holds, how many an eviction, shrink or cancel in
        flight takes away (none for a grow, whose added room stays the job's)."""
        if self.status.phase != Phase.PREEMPTING:
            return 0
        request = self.eviction or self.request or {}
        if self._grows(request):
            return 0
        resize_to = request.get("resize_to")
        return holds if resize_to is None else max(0, holds - int(resize_to))

    def nodes(self) -> set[str]:
        """Nodes the current placement binds, and those a grow in flight took room on."""
        return {b.node for b in self.bindings} | {b.node for b in self.growing}

    def keeps(self, task: int) -> bool:
        """Whether ``task``'s room stays with the job after it stops: a shrink's eviction
        (``resize_to``) keeps the bindings the next attempt restarts on."""
        resize_to = (self.eviction or {}).get("resize_to")
        return resize_to is not None and task < int(resize_to)


@dataclass
class NodeCondition:
    """What the log says of a node beyond its inventory (``NodeCordoned`` ... ``NodeReady``)."""

    ready: bool = True
    cordoned: bool = False
    drain: bool = False  # cordoned to be emptied (``tessera drain``): its jobs are evicted
    drained: bool = False  # NodeDrained since the last cordon
    since: float = 0.0  # epoch seconds of the last change
    last_heartbeat: float = 0.0  # from NodeNotReady: when its agent was last heard

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned


NODE_CONDITION_EVENTS = frozenset(
    {"NodeCordoned", "NodeUncordoned", "NodeNotReady", "NodeReady", "NodeDrained"}
)


PendingKey = tuple[int, int, str]


def pending_key(r: JobRecord) -> PendingKey:
    """The order of the pending jobs: higher priority first, then earlier admission, then id."""
    return (-r.priority, r.admitted_at, r.spec.id)


class ClusterView:
    """``rotation`` shifts where the node order starts (names sorted, then rotated).  Ties go to
    the first node in that order, so placement workers with different rotations pack different
    regions of the cluster first and rarely touch the same node at once (fewer conflicts)."""

    def __init__(self, rotation: int = 0, keep_ended: int | None = None) -> None:
        self.rotation = rotation
        # How many ended jobs (finished, failed, cancelled) stay in ``jobs``: those that ended
        # last, by the log position of their end (None: all).  A long-lived service would
        # otherwise hold every job it ever saw; nothing in a view reads an ended job's record
        # but the reports (``tessera status``) and the workload a placement worker learns.
        self.keep_ended = keep_ended
        self._ended: list[tuple[int, str]] = []  # heap: (position of the end, job) of ended jobs kept
        self.admitted = 0  # jobs ever admitted, those no longer kept included
        self.position = 0
        self.inventories: dict[str, NodeInventory] = {}
        self.stream_versions: dict[str, int] = {}
        self.jobs: dict[str, JobRecord] = {}
        self._cluster: ClusterState | None = None
        self._stale = False  # nodes registered since the arrays were last built
        self._held: dict[tuple[str, int], Placement] = {}  # (job, task) -> resources it holds
        # Indexes by state, kept as jobs move, so a cycle costs O(pending), not O(all jobs ever).
        self._pending: dict[str, None] = {}
        self._active: dict[str, None] = {}  # placed or running
        self._changed: dict[str, None] = {}  # jobs touched since the last drain_changed()
        self._feeds: dict[str, dict[str, None]] = {}  # more consumers' own changed sets (subscribe)
        self._ahead: set[int] = set()  # positions above ``position`` folded early (apply_ahead)
        self.queues: QueueTreeSpec | None = None  # the last QueuesApplied (None: none applied)
        self.conditions: dict[str, NodeCondition] = {}  # nodes cordoned or NotReady, ever
        self.estimator = RuntimeEstimator()  # run times of finished jobs, for backfill

    # -- folding ----------------------------------------------------------------------------
    @staticmethod
    def needs_body(stream: str, event_type: str) -> bool:
        """Whether folding this event reads its body.  Every other event (the copies of a job's
        events on node and task streams) only moves its stream's version: :meth:`advance`."""
        return (
            stream.startswith("job-")
            or event_type in ("NodeRegistered", "QueuesApplied")
            or event_type in NODE_CONDITION_EVENTS
        )

    def apply(self, event: RecordedEvent) -> bool:
        """Fold one event; False when it was already folded (duplicate, replayed, or ahead)."""
        if not self.advance(event.position, event.stream, event.version):
            return False
        self._fold_body(event)
        return True

    def advance(self, position: int, stream: str, version: int) -> bool:
        """Fold an event whose body the fold does not read (see :meth:`needs_body`), or the
        bookkeeping part of any event; False when it was already folded."""
        if position <= self.position:
            return False
        self.position = position
        if position in self._ahead:
            self._ahead.discard(position)  # folded early by apply_ahead: only the watermark moves
            return False
        self._version(stream, version)
        return True

    def _version(self, stream: str, version: int) -> None:
        # Only the versions of node and quota streams, the queue tree's and the reservations'
        # are read (placements and reservations expect them); a job's version is on its record,
        # and keeping those of every job and task stream ever written grew without bound.
        if stream.startswith(("node-", "quota-")) or stream in (QUEUES_STREAM, RESERVATIONS_STREAM):
            self.stream_versions[stream] = version

    def apply_ahead(self, events: Iterable[RecordedEvent]) -> None:
        """Fold this process's own just-appended events before the log delivers them.

        Safe because the append succeeded: every stream it touched was at the version this view
        read, so no event of another writer on those streams lies between what the view has
        folded and these; the events not yet folded below them touch other jobs and nodes, and
        their effects commute with these.  ``position`` stays the contiguous watermark (every
        event at or below it is folded); the positions folded early are skipped when the log
        brings them.
        """
        for event in events:
            if event.position <= self.position or event.position in self._ahead:
                continue
            self._ahead.add(event.position)
            self._version(event.stream, event.version)
            self._fold_body(event)

    def is_ahead(self, position: int) -> bool:
        return position in self._ahead

    @property
    def folded_ahead(self) -> int:
        """How many events beyond the watermark are folded already (0: the view is exactly the
        log up to ``position``, as a snapshot must be)."""
        return len(self._ahead)

    def _fold_body(self, event: RecordedEvent) -> None:
        if event.stream.startswith("job-"):
            self._apply_job(event)
        elif event.type == "NodeRegistered":
            self._register(NodeRegistered.model_validate(event.data).inventory)
        elif event.type == "QueuesApplied":
            self.queues = QueuesApplied.model_validate(event.data).tree
        elif event.type in NODE_CONDITION_EVENTS:
            self._condition(event)

    def _condition(self, event: RecordedEvent) -> None:
        node = str(event.data["node"])
        c = self.conditions.setdefault(node, NodeCondition())
        kind = event.type
        if kind == "NodeCordoned":
            c.cordoned, c.drain, c.drained = True, bool(event.data.get("drain", True)), False
        elif kind == "NodeUncordoned":
            c.cordoned = c.drain = c.drained = False
        elif kind == "NodeNotReady":
            c.ready, c.last_heartbeat = False, float(event.data.get("last_heartbeat", 0.0))
        elif kind == "NodeReady":
            c.ready = True
        elif kind == "NodeDrained":
            c.drained = True
        c.since = event.recorded_at.timestamp()
        cluster = self._cluster
        if cluster is not None and not self._stale and node in cluster.index:
            cluster.schedulable[cluster.index[node]] = c.schedulable

    def condition(self, node: str) -> NodeCondition:
        return self.conditions.get(node) or NodeCondition()

    def apply_all(self, events: Iterable[RecordedEvent]) -> int:
        return sum(self.apply(e) for e in events)

    def _apply_job(self, event: RecordedEvent) -> None:
        """One job event, through the job's state machine (``shared.core.lifecycle.evolve``);
        what the transition means for resources (take on placement, free per ended task, free
        all on preemption or cancel) is applied here."""
        job_id = event.stream.removeprefix("job-")
        record = self.jobs.get(job_id)
        self._changed[job_id] = None
        for feed in self._feeds.values():
            feed[job_id] = None
        kind = event.type
        if kind == "JobAdmitted":
            if record is None:
                admitted = JobAdmitted.model_validate(event.data)
                at = event.recorded_at.timestamp()
                self.jobs[job_id] = JobRecord(
                    spec=admitted.spec,
                    promoted_class=admitted.promoted_class,
                    admitted_at=event.position,
                    admitted_time=at,
                    version=event.version,
                    queued_time=at,
                )
                self._index(job_id, "pending")
                self.admitted += 1
            return
        if record is None:
            return
        record.version = event.version
        data = event.data  # validated when written; the hot task events are read as they are
        before = record.status
        after = evolve(before, kind, data)
        if after is None:
            return
        if kind in TASK_EVENTS:
            if after is before:
                return
            record.status = after
            task = int(data.get("task", 0))
            if kind == "JobStarted":
                record.started[task] = event.recorded_at.timestamp()
            elif kind == "TaskStopped":
                record.done[task] = "stopped"
                record.stops[task] = dict(data)
                if not record.keeps(task):
                    self._release(job_id, task)
            else:
                record.done[task] = "finished" if kind == "JobFinished" else "failed"
                self._release(job_id, task)
            if after.phase != before.phase:
                self._move(job_id, record, after.phase.value)
                if after.terminal:
                    self._release_growing(job_id, record)  # ended before its grow was carried out
                if after.phase == Phase.FINISHED and record.started:
                    run_s = event.recorded_at.timestamp() - min(record.started.values())
                    self.estimator.observe(core_job(record), max(0.0, run_s))
                if after.terminal:
                    self._ended_at(job_id, event.position)
            return
        if kind == "JobReserved":
            # When it was first held (the cycle offers holders in that order): the log's time.
            since = (record.reservation or {}).get("since", event.recorded_at.timestamp())
            record.reservation = {**data, "since": since}
            return
        if kind == "ReservationReleased":
            record.reservation = None
            record.backoff_until = float(data.get("backoff_until", 0.0))
            return
        if kind == "CancelRequested":
            if after.active:
                record.cancelling = str(data.get("reason", ""))
            return
        if after is before:
            return
        record.status = after
        if kind == "JobPlaced":
            placed = JobPlaced.model_validate(data)
            self._bind(job_id, record, placed, event.position)
            record.placed_time = event.recorded_at.timestamp()
            record.reservation = None
        elif kind == "PreemptionRequested":
            record.preempted_by = str(data.get("by_job", ""))
            record.request = dict(data)
            self._move(job_id, record, after.phase.value)
        elif kind == "JobGrowRequested":
            grow = JobGrowRequested.model_validate(data)
            record.request = dict(data)
            record.growing = list(grow.added)
            cluster = self._ensure_cluster()
            shape = record.shape
            for b in grow.added:
                self._held[(job_id, b.task)] = cluster.place(cluster.index[b.node], shape, tuple(b.gpus))
            self._move(job_id, record, after.phase.value)
        elif kind == "EvictionStarted":
            record.eviction = dict(data)
            record.preempted_by = str(data.get("by_job", ""))
            self._move(job_id, record, after.phase.value)
        elif kind == "PreemptionAbandoned":
            record.preempted_by = ""
            record.request = None
            self._release_growing(job_id, record)
            self._move(job_id, record, after.phase.value)
        elif kind == "JobPreempted":
            now = event.recorded_at.timestamp()
            checkpointed = bool(data.get("checkpointed", False))
            if checkpointed and record.started:
                record.kept_s += max(0.0, now - min(record.started.values()))
            record.resume = record.resume or checkpointed  # an older checkpoint is still there
            self._end_attempt(job_id, record, now)
            record.queued_time = now
            self._move(job_id, record, "pending")
        elif kind == "JobResized":
            self._resized(job_id, record, JobResized.model_validate(data), event.recorded_at.timestamp())
        elif kind == "JobCancelled":
            self._end_attempt(job_id, record, event.recorded_at.timestamp())
            self._move(job_id, record, "cancelled")
            self._ended_at(job_id, event.position)

    def _ended_at(self, job_id: str, position: int) -> None:
        """Keep the ``keep_ended`` jobs that ended last, by log position: the same ones in every
        view of the same log, whatever order it folded its own appends in."""
        heapq.heappush(self._ended, (position, job_id))  # also when all are kept: for snapshots
        while self.keep_ended is not None and len(self._ended) > self.keep_ended:
            _, old = heapq.heappop(self._ended)
            self.jobs.pop(old, None)
            self._changed[old] = None  # consumers look it up, find it gone, and drop it
            for feed in self._feeds.values():
                feed[old] = None

    def _end_attempt(self, job_id: str, record: JobRecord, now: float) -> None:
        """Free every task of the current placement and forget it (preemption, cancel)."""
        gpus = record.shape.total_gpu_milli / 1000.0
        for start in record.started.values():
            record.attained_gpu_s += max(0.0, now - start) * gpus
        for b in record.bindings:
            self._release(job_id, b.task)
        self._release_growing(job_id, record)
        record.bindings, record.started, record.done, record.stops = [], {}, {}, {}
        record.placed_at = None
        record.preempted_by = ""
        record.request = record.eviction = None

    def _release_growing(self, job_id: str, record: JobRecord) -> None:
        for b in record.growing:
            self._release(job_id, b.task)
        record.growing = []

    def _resized(self, job_id: str, record: JobRecord, resized: JobResized, now: float) -> None:
        """The next attempt on the bindings the resize kept (their room is still held): a
        shrink's first ones, or a grow's old ones plus the room its request took."""
        if resized.checkpointed and record.started:
            record.kept_s += max(0.0, now - min(record.started.values()))
        record.resume = record.resume or resized.checkpointed
        gpus = record.shape.total_gpu_milli / 1000.0
        for start in record.started.values():
            record.attained_gpu_s += max(0.0, now - start) * gpus
        kept = {b.task for b in resized.bindings}
        for b in [*record.bindings, *record.growing]:
            if b.task not in kept:
                self._release(job_id, b.task)
        record.bindings, record.growing = list(resized.bindings), []
        record.started, record.done, record.stops = {}, {}, {}
        record.preempted_by = ""
        record.request = record.eviction = None
        record.placed_time = now
        self._move(job_id, record, "placed")

    def _bind(self, job_id: str, record: JobRecord, placed: JobPlaced, position: int) -> None:
        record.bindings = list(placed.bindings)
        record.started, record.done, record.stops = {}, {}, {}
        record.eviction = None
        self._move(job_id, record, "placed")
        record.placed_at = position
        cluster = self._ensure_cluster()
        shape = record.shape
        for b in placed.bindings:
            node = cluster.index[b.node]
            self._held[(job_id, b.task)] = cluster.place(node, shape, tuple(b.gpus))

    def _move(self, job_id: str, record: JobRecord, state: JobState) -> None:
        """Re-index a job whose phase (already in ``record.status``) is ``state``."""
        self._pending.pop(job_id, None)
        self._active.pop(job_id, None)
        self._index(job_id, state)

    def _index(self, job_id: str, state: JobState) -> None:
        if state == "pending":
            self._pending[job_id] = None
        elif state in ACTIVE:
            self._active[job_id] = None

    def _release(self, job_id: str, task: int) -> None:
        placement = self._held.pop((job_id, task), None)
        cluster = self.cluster
        if placement is not None and cluster is not None:
            cluster.remove(placement)

    def _register(self, inventory: NodeInventory) -> None:
        known = self.inventories.get(inventory.name)
        if known == inventory:
            return
        self.inventories[inventory.name] = inventory
        self._stale = True  # rebuilt on next use: registering 1,500 nodes costs one rebuild

    @property
    def cluster(self) -> ClusterState | None:
        if self._stale:
            self._rebuild()
        return self._cluster

    def _rebuild(self) -> None:
        """A new node: rebuild the arrays and re-take every held placement on them."""
        self._stale = False
        if not self.inventories:
            self._cluster = None
            return
        names = sorted(self.inventories)
        offset = self.rotation % len(names)
        specs = [node_spec(self.inventories[name]) for name in names[offset:] + names[:offset]]
        cluster = ClusterState(specs)
        for node, c in self.conditions.items():
            if node in cluster.index:
                cluster.schedulable[cluster.index[node]] = c.schedulable
        held = {}
        for key, p in self._held.items():
            name = self._cluster.names[p.node] if self._cluster is not None else None
            if name is not None and name in cluster.index:
                held[key] = cluster.place(cluster.index[name], p.task, p.gpus)
        self._cluster, self._held = cluster, held

    def _ensure_cluster(self) -> ClusterState:
        if self.cluster is None:
            raise ValueError("a job was placed before any node registered")
        return self.cluster

    # -- queries ----------------------------------------------------------------------------
    def pending(self) -> list[JobRecord]:
        """Pending jobs in :func:`pending_key` order."""
        return sorted((self.jobs[j] for j in self._pending), key=pending_key)

    def drain_changed(self) -> list[str]:
        """Ids of the jobs that any event touched since the last call (or since restore), once each.

        For the one consumer of a view that reacts to job changes (the agent): it looks at these
        instead of every active job, so its cost follows the event rate, not the cluster's size.
        """
        changed, self._changed = list(self._changed), {}
        return changed

    def subscribe(self, name: str) -> None:
        """Start a change feed of its own for another consumer (from now on; what happened
        before is the consumer's to read from the view as it is)."""
        self._feeds[name] = {}

    def subscribed(self, name: str) -> bool:
        return name in self._feeds

    def drain_feed(self, name: str) -> list[str]:
        """Ids of the jobs touched since the last call for ``name`` (see :meth:`subscribe`)."""
        changed = list(self._feeds[name])
        self._feeds[name] = {}
        return changed

    def pending_ids(self) -> Collection[str]:
        """Ids of the pending jobs, in no set order, without sorting or building records."""
        return self._pending.keys()

    def active_ids(self) -> Iterable[str]:
        """Ids of the jobs placed or running, in :meth:`active`'s order, without building records."""
        return self._active.keys()

    def mark_changed(self, job_ids: Iterable[str]) -> None:
        """Hand ids back to the next :meth:`drain_changed` (their handling failed)."""
        for job_id in job_ids:
            self._changed[job_id] = None

    def held(self, job_id: str, task: int) -> Placement | None:
        """The resources a task of a placed or running job holds in :attr:`cluster`."""
        if self._stale:
            self._rebuild()
        return self._held.get((job_id, task))

    def holding(self, record: JobRecord) -> list[Placement]:
        """What a placed or running job's tasks hold now, in task order: its bindings and the
        room a grow in flight took (the job's from that append on); a task that ended, one
        replica of several, holds nothing while the others run on."""
        job_id = record.spec.id
        found = (
            self.held(job_id, b.task)
            for b in sorted([*record.bindings, *record.growing], key=lambda b: b.task)
        )
        return [p for p in found if p is not None]

    def active(self) -> list[JobRecord]:
        """Jobs placed or running, in the order they were admitted or restored."""
        return [self.jobs[j] for j in self._active]

    def node_version(self, node: str) -> int:
        return self.version(node_stream(node))

    def version(self, stream: str) -> int:
        """The version this view has folded of a node or quota stream, the queue tree's or the
        reservations' (0: none yet, as the store's ``NO_STREAM``)."""
        return self.stream_versions.get(stream, 0)

    def summary(self) -> dict[str, Any]:
        """A JSON-able digest for comparing two views (replay vs live)."""
        cluster = self.cluster
        return {
            "position": self.position,
            "nodes": sorted(self.inventories),
            "free": (
                {n: cluster.free_state(i) for i, n in enumerate(cluster.names)} if cluster is not None else {}
            ),
            "jobs": {k: (j.state, [b.node for b in j.bindings]) for k, j in sorted(self.jobs.items())},
            "conditions": {n: dataclasses.asdict(c) for n, c in sorted(self.conditions.items())},
        }


SNAPSHOT_NAME = "cluster-view"
SNAPSHOT_VERSION = 4  # 4: ended jobs kept (by where they ended), jobs admitted; node versions only


def to_snapshot(view: ClusterView) -> dict[str, Any]:
    """The view as JSON: enough to rebuild it exactly (the arrays are re-derived)."""
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "position": view.position,
        "inventories": [i.model_dump(mode="json", by_alias=True) for i in view.inventories.values()],
        "stream_versions": view.stream_versions,
        "jobs": {
            job_id: {
                "spec": r.spec.model_dump(mode="json", by_alias=True),
                "admitted_at": r.admitted_at,
                "admitted_time": r.admitted_time,
                "status": _status_json(r.status),
                "bindings": [b.model_dump(mode="json") for b in r.bindings],
                "started": {str(k): v for k, v in r.started.items()},
                "done": {str(k): v for k, v in r.done.items()},
                "placed_at": r.placed_at,
                "version": r.version,
                "queued_time": r.queued_time,
                "placed_time": r.placed_time,
                "attained_gpu_s": r.attained_gpu_s,
                "reservation": r.reservation,
                "backoff_until": r.backoff_until,
                "preempted_by": r.preempted_by,
                "request": r.request,
                "eviction": r.eviction,
                "stops": {str(k): v for k, v in r.stops.items()},
                "resume": r.resume,
                "kept_s": r.kept_s,
                "promoted_class": r.promoted_class,
                "growing": [b.model_dump(mode="json") for b in r.growing],
                "cancelling": r.cancelling,
            }
            for job_id, r in view.jobs.items()
        },
        "conditions": {n: dataclasses.asdict(c) for n, c in view.conditions.items()},
        "queues": view.queues.model_dump(mode="json", by_alias=True) if view.queues is not None else None,
        "estimator": view.estimator.to_json(),
        "ended": [[position, job_id] for position, job_id in sorted(view._ended)],
        "admitted": view.admitted,
    }


def _status_json(status: JobStatus) -> dict[str, Any]:
    return {
        "phase": status.phase.value,
        "tasks": status.tasks,
        "attempt": status.attempt,
        "preemptions": status.preemptions,
        "started": sorted(status.started),
        "finished": sorted(status.finished),
        "failed": sorted(status.failed),
        "stopped": sorted(status.stopped),
        "evicting": status.evicting,
    }


def _status_from(raw: Mapping[str, Any]) -> JobStatus:
    return JobStatus(
        phase=Phase(raw["phase"]),
        tasks=int(raw["tasks"]),
        attempt=int(raw["attempt"]),
        preemptions=int(raw["preemptions"]),
        started=frozenset(raw["started"]),
        finished=frozenset(raw["finished"]),
        failed=frozenset(raw["failed"]),
        stopped=frozenset(raw["stopped"]),
        evicting=bool(raw["evicting"]),
    )


def from_snapshot(body: Mapping[str, Any], rotation: int = 0, keep_ended: int | None = None) -> ClusterView:
    """Rebuild a view from :func:`to_snapshot`; resources held by unfinished tasks are re-taken.
    A snapshot that kept more ended jobs than ``keep_ended`` is cut to the last ones, as the
    fold would have; one that kept fewer cannot give back those it dropped (the view then keeps
    fewer until as many more have ended)."""
    if body.get("snapshot_version") != SNAPSHOT_VERSION:
        raise ValueError(f"unknown snapshot version {body.get('snapshot_version')!r}")
    view = ClusterView(rotation, keep_ended)
    view.position = int(body["position"])
    view.stream_versions = {k: int(v) for k, v in body["stream_versions"].items()}
    view.admitted = int(body["admitted"])
    for raw in body["inventories"]:
        inventory = NodeInventory.model_validate(raw)
        view.inventories[inventory.name] = inventory
    view.conditions = {n: NodeCondition(**c) for n, c in body["conditions"].items()}
    view._stale = True
    if body.get("queues") is not None:
        view.queues = QueueTreeSpec.model_validate(body["queues"])
    view.estimator = RuntimeEstimator.from_json(body.get("estimator") or {})
    for job_id, raw in body["jobs"].items():
        record = JobRecord(
            spec=JobSpec.model_validate(raw["spec"]),
            admitted_at=int(raw["admitted_at"]),
            admitted_time=float(raw["admitted_time"]),
            status=_status_from(raw["status"]),
            bindings=[TaskBinding.model_validate(b) for b in raw["bindings"]],
            started={int(k): float(v) for k, v in raw["started"].items()},
            done={int(k): str(v) for k, v in raw["done"].items()},
            placed_at=raw["placed_at"],
            version=int(raw["version"]),
            queued_time=float(raw["queued_time"]),
            placed_time=float(raw["placed_time"]),
            attained_gpu_s=float(raw["attained_gpu_s"]),
            reservation=raw["reservation"],
            backoff_until=float(raw["backoff_until"]),
            preempted_by=str(raw["preempted_by"]),
            request=raw["request"],
            eviction=raw["eviction"],
            stops={int(k): dict(v) for k, v in raw["stops"].items()},
            resume=bool(raw["resume"]),
            kept_s=float(raw["kept_s"]),
            growing=[TaskBinding.model_validate(b) for b in raw.get("growing", ())],
            cancelling=raw.get("cancelling"),
            promoted_class=raw.get("promoted_class"),
        )
        view.jobs[job_id] = record
        view._index(job_id, record.state)
        view._changed[job_id] = None
    for position, job_id in body["ended"]:
        view._ended_at(str(job_id), int(position))
    cluster = view.cluster
    if cluster is None:
        return view  # no node registered: nothing can be held
    for record in view.active():
        shape = record.shape
        for b in record.bindings:
            if b.task not in record.done or record.keeps(b.task):
                node = cluster.index[b.node]
                view._held[(record.spec.id, b.task)] = cluster.place(node, shape, tuple(b.gpus))
        for b in record.growing:
            view._held[(record.spec.id, b.task)] = cluster.place(cluster.index[b.node], shape, tuple(b.gpus))
    return view


def job_state(events: Sequence[RecordedEvent]) -> tuple[JobState, int] | None:
    """A job's state and stream version from its own stream alone, as the fold gives them.

    For readers that keep no view of the cluster (admission, cancelling a job): the same state
    machine as :class:`ClusterView` (``shared.core.lifecycle.evolve``), without the resources.
    ``None``: never admitted.
    """
    status: JobStatus | None = None
    version = 0
    for event in events:
        version = event.version
        status = evolve(status, event.type, event.data)
    return (status.phase.value, version) if status is not None else None


def digest(view: ClusterView) -> str:
    """A short hash of :meth:`ClusterView.summary`: equal digests, equal states."""
    import hashlib
    import json

    body = json.dumps(view.summary(), sort_keys=True, default=list)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def fold(events: Iterable[RecordedEvent]) -> ClusterView:
    view = ClusterView()
    view.apply_all(events)
    return view
