"""The scheduling cycle's snapshot, built from a folded :class:`ClusterView`.

Everything the cycle reads comes from the event log: nodes and what runs on them, the queue
tree (the last ``QueuesApplied``; until one is applied, one open queue per queue name in use),
pending and running jobs with their attempts, reservations (``JobReserved``, node names mapped
to this view's node order) and back-offs (``ReservationReleased``), and the run times of
finished jobs for the estimator.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection
from dataclasses import replace

from shared.core.cluster import BoolArray, ClusterState
from shared.core.cycle import Snapshot
from shared.core.jobs import Job, Reservation, Running
from shared.core.lifecycle import Phase
from shared.core.memo import CycleMemo, PendingDelta, RunningDelta
from shared.core.queues import QueueTree, open_tree
from shared.state.fold import ClusterView, JobRecord, PendingKey, pending_key
from shared.state.wire import core_job, queue_tree


class SnapshotBuilder:
    """Builds snapshots of one view, keeping each job's core objects until its stream moves (a
    busy view holds thousands of running jobs; rebuilding them all per cycle cost more than the
    cycle).  Entries are keyed by the job stream's version, so a stale one is never used."""

    def __init__(self, incremental: bool = True) -> None:
        self._jobs: dict[str, tuple[int, int, Job]] = {}
        self._running: dict[str, tuple[int, int, Running | None]] = {}
        self._cluster_id = 0
        # Incremental: the running jobs are kept from one build to the next and only those the
        # view's change feed names are looked at again (a busy view holds thousands).
        self.incremental = incremental
        self._feed = f"snapshot-{id(self)}"
        self._view_id = 0
        self._runs: dict[str, Running] = {}
        self._generation = 0
        self._delta: RunningDelta | None = None
        # The pending jobs, kept in the view's order the same way (a backlog holds thousands).
        self._pending = _Ordered()
        self._pending_delta: PendingDelta | None = None
        self._holding: set[str] = set()  # pending jobs with a reservation or a back-off
        # How many kept jobs (pending and running) name each queue: until a tree is applied the
        # cycle's queues are one open queue per name in use, kept as one object while the names
        # stay the same, so the cycle's memo can follow its pending order from cycle to cycle.
        self._queue_uses: dict[str, int] = {}
        self._tree: tuple[object, QueueTree | None] = (None, None)
        self.memo = CycleMemo() if incremental else None

    def job(self, r: JobRecord) -> Job:
        found = self._jobs.get(r.spec.id)
        if found is not None and found[0] == r.version and found[1] == r.admitted_at:
            return found[2]
        job = core_job(r)
        self._jobs[r.spec.id] = (r.version, r.admitted_at, job)
        return job

    def running(self, view: ClusterView, r: JobRecord) -> Running | None:
        found = self._running.get(r.spec.id)
        if found is not None and found[0] == r.version and found[1] == self._cluster_id:
            return found[2]
        # A grow in flight holds its added room already: it counts as the job's (queue usage,
        # what a victim frees), and the job is busy resizing (``preempting``): not grown again.
        placements = view.holding(r)
        run = None
        if placements:
            run = Running(
                self.job(r),
                tuple(placements),
                started=r.placed_time,
                preempting=r.status.phase == Phase.PREEMPTING,
                leaving=r.leaving(len(placements)),
            )
        self._running[r.spec.id] = (r.version, self._cluster_id, run)
        return run

    def _scan(self, view: ClusterView) -> list[Running]:
        return [run for r in view.active() if (run := self.running(view, r)) is not None]

    def _use(self, queue: str, sign: int) -> None:
        left = self._queue_uses.get(queue, 0) + sign
        if left:
            self._queue_uses[queue] = left
        else:
            del self._queue_uses[queue]

    def _keep_run(self, job_id: str, run: Running) -> None:
        self._runs[job_id] = run
        self._use(run.job.queue, 1)

    def _drop_run(self, job_id: str) -> bool:
        run = self._runs.pop(job_id, None)
        if run is not None:
            self._use(run.job.queue, -1)
        return run is not None

    def _keep_pending(self, r: JobRecord) -> Job:
        job = self.job(r)
        self._pending.add(pending_key(r), job)
        self._use(job.queue, 1)
        if r.reservation is not None or r.backoff_until:
            self._holding.add(r.spec.id)
        return job

    def _follow(self, view: ClusterView) -> None:
        """Keep the running and pending jobs from one build to the next: only the jobs the view's
        change feed names since the last build are looked at again.  A changed job leaves its
        list and comes back (running: at its end), and the snapshot says so (``RunningDelta``,
        ``PendingDelta``), so the cycle's memo follows them instead of laying every running task
        out again and sorting every waiting job."""
        self._generation += 1
        if id(view) != self._view_id or not view.subscribed(self._feed):
            self._view_id = id(view)
            view.subscribe(self._feed)
            self._runs, self._queue_uses, self._pending, self._holding = {}, {}, _Ordered(), set()
            for r in view.active():
                if (run := self.running(view, r)) is not None:
                    self._keep_run(r.spec.id, run)
            for r in view.pending():
                self._keep_pending(r)
            self._delta = self._pending_delta = None
            return
        removed: set[str] = set()
        gone: set[str] = set()
        came: list[Job] = []
        appended = 0
        for job_id in view.drain_feed(self._feed):
            if self._drop_run(job_id):
                removed.add(job_id)
            left = self._pending.remove(job_id)
            if left is not None:
                gone.add(job_id)
                self._use(left.queue, -1)
                self._holding.discard(job_id)
            record = view.jobs.get(job_id)
            if record is None:
                continue
            if record.status.active:
                run = self.running(view, record)
                if run is not None:
                    self._keep_run(job_id, run)
                    appended += 1
            elif job_id in view.pending_ids():
                came.append(self._keep_pending(record))
        previous = self._generation - 1
        self._delta = RunningDelta(self._generation, previous, frozenset(removed), appended)
        self._pending_delta = PendingDelta(self._generation, previous, frozenset(gone), tuple(came))

    def _queues(self, view: ClusterView) -> QueueTree:
        """The applied tree, or one open queue per queue name in use (as ``run_cycle`` makes
        it), the same object while what it is made from stays the same."""
        applied = view.queues
        source: object = applied if applied is not None else frozenset(self._queue_uses)
        kept_source, tree = self._tree
        same = source is kept_source if applied is not None else source == kept_source
        if not same or tree is None:
            tree = (
                queue_tree(applied)
                if applied is not None
                else open_tree(sorted(self._queue_uses) or ["default"])
            )
            self._tree = (source, tree)
        return tree

    def build(
        self,
        view: ClusterView,
        now: float,
        actionable: Collection[str] | None = None,
        preferred: BoolArray | None = None,
    ) -> Snapshot | None:
        cluster = view.cluster
        if cluster is None:
            return None
        if id(cluster) != self._cluster_id:  # a node registered: placements were re-taken
            self._cluster_id = id(cluster)
            self._running.clear()
            self._view_id = 0  # every running job again
        if len(self._jobs) > 2 * len(view.jobs) + 1024:
            self._jobs = {k: v for k, v in self._jobs.items() if k in view.jobs}
            self._running = {k: v for k, v in self._running.items() if k in view.jobs}
        if not self.incremental:
            pending = [self.job(r) for r in view.pending()]
            return _snapshot(view, cluster, now, pending, self._scan(view), actionable, preferred)
        self._follow(view)
        pending, running = list(self._pending.jobs), list(self._runs.values())
        snapshot = _snapshot(
            view, cluster, now, pending, running, actionable, preferred, self._holding, self._queues(view)
        )
        return replace(
            snapshot,
            memo=self.memo,
            running_delta=self._delta,
            pending_delta=self._pending_delta,
        )


def build_snapshot(
    view: ClusterView,
    now: float,
    actionable: Collection[str] | None = None,
    preferred: BoolArray | None = None,
) -> Snapshot | None:
    """A one-off snapshot (tests, ``tessera status``); services keep a :class:`SnapshotBuilder`."""
    return SnapshotBuilder(incremental=False).build(view, now, actionable, preferred)


def _snapshot(
    view: ClusterView,
    cluster: ClusterState,
    now: float,
    pending: list[Job],
    running: list[Running],
    actionable: Collection[str] | None,
    preferred: BoolArray | None,
    holding: Collection[str] | None = None,
    queues: QueueTree | None = None,
) -> Snapshot:
    reservations: dict[str, Reservation] = {}
    backoff: dict[str, float] = {}
    # Only the few pending jobs that hold a reservation or a back-off, in the view's order
    # (``holding``: the pending jobs that hold one or held one, kept by the builder; else all).
    records = [view.jobs[j] for j in (view.pending_ids() if holding is None else holding)]
    held = [r for r in records if r.reservation is not None or r.backoff_until > now]
    for r in sorted(held, key=pending_key):
        if r.reservation is not None:
            nodes = tuple(sorted(cluster.index[n] for n in r.reservation["nodes"] if n in cluster.index))
            if nodes:
                reservations[r.spec.id] = Reservation(
                    job=r.spec.id,
                    nodes=nodes,
                    since=float(r.reservation.get("since", 0.0)),
                    expected_start=float(r.reservation["expected_start"]),
                    timeout_at=float(r.reservation["timeout_at"]),
                    preemption=bool(r.reservation.get("preemption", False)),
                )
        if r.backoff_until > now:
            backoff[r.spec.id] = r.backoff_until
    return Snapshot(
        cluster=cluster,
        pending=pending,
        running=running,
        queues=queues if queues is not None or view.queues is None else queue_tree(view.queues),
        reservations=reservations,
        backoff=backoff,
        estimator=view.estimator,
        actionable=frozenset(actionable) if actionable is not None else None,
        preferred=preferred,
    )


class _Ordered:
    """Pending jobs sorted by :func:`pending_key`: an arrival is inserted in place and a
    departure taken out, instead of sorting every waiting job again each cycle."""

    def __init__(self) -> None:
        self.keys: list[PendingKey] = []
        self.jobs: list[Job] = []
        self._key_of: dict[str, PendingKey] = {}

    def add(self, key: PendingKey, job: Job) -> None:
        at = bisect.bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.jobs.insert(at, job)
        self._key_of[job.id] = key

    def remove(self, job_id: str) -> Job | None:
        key = self._key_of.pop(job_id, None)
        if key is None:
            return None
        at = bisect.bisect_left(self.keys, key)
        del self.keys[at]
        return self.jobs.pop(at)
