"""The scheduling cycle's snapshot, built from a folded :class:`ClusterView`.

Everything the cycle reads comes from the event log: nodes and what runs on them, the queue
tree (the last ``QueuesApplied``; until one is applied, one open queue per queue name in use),
pending and running jobs with their attempts, reservations (``JobReserved``, node names mapped
to this view's node order) and back-offs (``ReservationReleased``), and the run times of
finished jobs for the estimator.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from shared.core.cluster import BoolArray, ClusterState, Placement
from shared.core.cycle import Snapshot
from shared.core.jobs import Job, Reservation, Running
from shared.core.lifecycle import Phase
from shared.core.memo import CycleMemo, RunningDelta
from shared.state.fold import ClusterView, JobRecord
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
        placements: list[Placement] = []
        # A grow in flight holds its added room already: it counts as the job's (queue usage,
        # what a victim frees), and the job is busy resizing (``preempting``): not grown again.
        for b in sorted([*r.bindings, *r.growing], key=lambda b: b.task):
            held = view.held(r.spec.id, b.task)
            if held is not None:
                placements.append(held)
        run = None
        if placements:
            run = Running(
                self.job(r),
                tuple(placements),
                started=r.placed_time,
                preempting=r.status.phase == Phase.PREEMPTING,
            )
        self._running[r.spec.id] = (r.version, self._cluster_id, run)
        return run

    def _scan(self, view: ClusterView) -> list[Running]:
        return [run for r in view.active() if (run := self.running(view, r)) is not None]

    def _running_jobs(self, view: ClusterView) -> list[Running]:
        """The running jobs, kept from one build to the next: only the jobs the view's change
        feed names since the last build are looked at again; a changed job leaves the list and
        comes back at its end, and the snapshot says so (``RunningDelta``), so the cycle's memo
        follows it instead of laying every running task out again."""
        self._generation += 1
        if id(view) != self._view_id or not view.subscribed(self._feed):
            self._view_id = id(view)
            view.subscribe(self._feed)
            self._runs = {r.spec.id: run for r in view.active() if (run := self.running(view, r)) is not None}
            self._delta = None
        else:
            removed: set[str] = set()
            appended = 0
            for job_id in view.drain_feed(self._feed):
                if self._runs.pop(job_id, None) is not None:
                    removed.add(job_id)
                record = view.jobs.get(job_id)
                if record is not None and record.status.active:
                    run = self.running(view, record)
                    if run is not None:
                        self._runs[job_id] = run
                        appended += 1
            self._delta = RunningDelta(self._generation, self._generation - 1, frozenset(removed), appended)
        return list(self._runs.values())

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
        pending = [self.job(r) for r in view.pending()]
        if not self.incremental:
            return _snapshot(view, cluster, now, pending, self._scan(view), actionable, preferred)
        running = self._running_jobs(view)
        snapshot = _snapshot(view, cluster, now, pending, running, actionable, preferred)
        return replace(snapshot, memo=self.memo, running_delta=self._delta)


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
) -> Snapshot:
    reservations: dict[str, Reservation] = {}
    backoff: dict[str, float] = {}
    for r in view.pending():
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
        queues=queue_tree(view.queues) if view.queues is not None else None,
        reservations=reservations,
        backoff=backoff,
        estimator=view.estimator,
        actionable=frozenset(actionable) if actionable is not None else None,
        preferred=preferred,
    )
