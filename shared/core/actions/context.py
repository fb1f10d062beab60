"""The scratch state one cycle's stages share: the private cluster copy, queue usage, reservations.

Created by ``run_cycle`` and dropped with it; nothing here outlives a cycle except what
:meth:`CycleContext.finish` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shared.core.cluster import BoolArray, ClusterState, Placement
from shared.core.cycle import (
    CycleConfig,
    CycleResult,
    Intent,
    Place,
    Reserve,
    Snapshot,
)
from shared.core.framework import Code, Status
from shared.core.homes import HomeIndex, HomeLadder, home_index
from shared.core.jobs import Job, Reservation, Running
from shared.core.queues import QueueTree, demand_of, dominant_share
from shared.core.statement import Statement
from shared.core.task import TaskShape

ReleaseRow = tuple[float, int, int, tuple[tuple[int, int], ...]]
"""A task's leaving: (when it is expected, milli-CPU, MiB, (GPU slot, milli) pairs it frees)."""


def _add(table: dict[str, list[float]], queue: str, job: Job, replicas: float) -> None:
    """Add ``replicas`` of ``job``'s tasks (negative: take away) to ``queue``'s row of a per-queue
    (milli-GPU, milli-CPU, MiB) table."""
    u = table.setdefault(queue, [0.0, 0.0, 0.0])
    s = job.shape
    u[0] += s.total_gpu_milli * replicas
    u[1] += s.cpu_milli * replicas
    u[2] += s.memory_mib * replicas


def release_row(end: float, p: Placement) -> ReleaseRow:
    t = p.task
    return (end, t.cpu_milli, t.memory_mib, tuple((g, t.gpu_milli) for g in p.gpus))


_ZERO = (0.0, 0.0, 0.0)


@dataclass
class CycleContext:
    snapshot: Snapshot
    config: CycleConfig
    now: float
    rng: np.random.Generator
    queues: QueueTree
    cluster: ClusterState = field(init=False)  # the cycle's private copy of the snapshot's
    intents: list[Intent] = field(default_factory=list)
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    unschedulable: dict[str, Status] = field(default_factory=dict)
    touched: set[int] = field(default_factory=set)
    usage: dict[str, list[float]] = field(default_factory=dict)
    """Per leaf queue: (milli-GPU, milli-CPU, MiB) its running and just-placed jobs hold, less
    the tasks on their way out, plus what its preemptors hold for themselves.  What guarantees,
    reclaim and fair share read.  Plain floats, not arrays: a busy cycle reads them for every
    job it looks at."""
    leaving: dict[str, list[float]] = field(default_factory=dict)
    """Per leaf queue: what its tasks on their way out (evicted, shrunk) still hold.  No longer
    the queue's for its guarantee, but held until they stop: a queue's max counts them, or a
    job placed while its queue's victims stopped would take the queue past its max."""
    deserved: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # per queue
    blocked: list[Job] = field(default_factory=list)  # jobs allocate could not place, in order
    ordered: dict[str, list[Job]] = field(default_factory=dict)  # per leaf: pending, in order
    reservations: dict[str, Reservation] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)
    evicting: set[str] = field(default_factory=set)  # jobs already being preempted
    wake_at: float = float("inf")
    stopped: Status | None = None  # why allocate stopped early (strict order, budget), if it did
    release: dict[int, list[ReleaseRow]] | None = None
    """Per node, what holds room there and when it is expected to go (``reserve.release_index``)."""
    lowest: dict[str, int] = field(default_factory=dict)
    """The lowest priority running in each queue ("" for the whole cluster), from enqueue."""
    considered: int = 0  # pending jobs allocate has searched room for (queue_depth)
    reservations_full: bool = False  # max_reservations reached in this allocate
    slots_elsewhere: int = 0
    """Reservation slots due to blocked jobs of other workers (not actionable here) in this
    allocate: their own workers reserve for them."""
    victims: object | None = None  # preempt.VictimIndex, built when a preemptor first needs it
    counted: dict[str, int] = field(default_factory=dict)
    """Pending jobs already counted in their queue's usage, and for how many replicas: each
    preemptor holding its victims' room (``count_held``)."""
    going: dict[str, int] = field(default_factory=dict)
    """Running jobs with tasks on their way out (evicted, shrunk), and how many: the
    highest-numbered ones, as a shrink takes them."""
    leaving_at: dict[int, list[Placement]] = field(default_factory=dict)
    """Per node, the tasks there on their way out: the room they free is promised to the
    preemptors that asked for it (``stacking.py``)."""
    shared_room: object | None = None  # stacking.SharedRoom, built when a preemptor first needs it
    changed_holds: set[int] = field(default_factory=set)
    """Nodes whose reservations, tasks on their way out or placements changed since
    ``shared_room`` was worked out."""

    def __post_init__(self) -> None:
        self.cluster = self.snapshot.cluster.copy()
        self.stmt = Statement(self.cluster)
        self.pending_by_id: dict[str, Job] = {j.id: j for j in self.snapshot.pending}
        pending = self.pending_by_id
        self.reservations = {
            job: r for job, r in self.snapshot.reservations.items() if r.nodes and job in pending
        }
        self.backoff = {job: t for job, t in self.snapshot.backoff.items() if t > self.now}
        self.running_by_id: dict[str, Running] = {r.job.id: r for r in self.snapshot.running}
        self.evicting = {r.job.id for r in self.snapshot.running if r.preempting}
        self._shares: dict[str, float] = {}
        self._capacity: tuple[float, float, float] | None = None
        self._estimates: dict[str, float] = {}
        self._reserved_by = np.full(self.cluster.size, -1, dtype=np.int64)
        self._reservation_ids: list[str] = []
        self._rebuild_reserved()
        self._all_schedulable = bool(self.cluster.schedulable.all())
        self._homes: tuple[HomeIndex, HomeLadder] | None = None

    # -- queue bookkeeping -------------------------------------------------------------------
    def queue_of(self, job: Job) -> str:
        return job.queue if job.queue in self.queues.specs else ""

    def add_usage(self, job: Job, replicas: int, sign: float = 1.0) -> None:
        q = self.queue_of(job)
        if q:
            _add(self.usage, q, job, sign * replicas)
            self._shares.pop(q, None)

    def add_leaving(self, job: Job, replicas: int) -> None:
        """``replicas`` of the job's tasks are on their way out: they leave its queue's usage
        and stay in what its max counts until they stop."""
        self.add_usage(job, replicas, -1.0)
        before = self.going.get(job.id, 0)
        self.going[job.id] = before + replicas
        r = self.running_by_id.get(job.id)
        if r is not None:  # the highest-numbered tasks not yet leaving
            top = r.replicas - before
            for p in r.placements[max(0, top - replicas) : top]:
                self.leaving_at.setdefault(p.node, []).append(p)
                self.changed_holds.add(p.node)
        q = self.queue_of(job)
        if q:
            _add(self.leaving, q, job, replicas)

    def count_held(self, job: Job) -> None:
        """Count a preemptor's fewest replicas in its queue's usage while it holds its victims'
        room: otherwise its queue looks as if it still had a guarantee to reclaim, and each cycle
        until the preemptor starts would evict again for the same room."""
        if job.id not in self.counted:
            self.counted[job.id] = job.fewest
            self.add_usage(job, job.fewest)

    def within_max(self, job: Job, replicas: int) -> bool:
        """Whether ``replicas`` more tasks keep the job's queue and its ancestors within ``max``."""
        return self._over_max(job, replicas) is None

    def above_max_alone(self, job: Job, replicas: int) -> str | None:
        """The queue (its own or an ancestor) whose ``max`` ``replicas`` tasks of the job exceed
        even with nothing else running: a tree applied after the job was admitted lowered it, so
        the job waits for a tree that raises it, not for room."""
        passed = self.queues.max_passed_alone(self.queue_of(job), demand_of(job.shape, replicas))
        return None if passed is None else passed[0]

    def _over_max(self, job: Job, replicas: int) -> str | None:
        """The nearest of the job's queue and its ancestors that ``replicas`` more tasks take past
        its ``max``, counting what the queues hold, else None."""
        limits = self.queues.limiting(self.queue_of(job))
        if not limits:
            return None
        replicas = max(0, replicas - self.counted.get(job.id, 0))  # a preemptor's held: in the usage
        extra = demand_of(job.shape, replicas)
        # What the queues' tasks hold: their usage and their tasks on the way out.
        held = {k: np.array(v) for k, v in self.usage.items()}
        for k, v in self.leaving.items():
            held[k] = held[k] + np.array(v) if k in held else np.array(v)
        totals = self.queues.subtree_totals(held)
        for name in limits:  # a queue without a max never is the one passed
            if bool((totals[name] + extra > self.queues.specs[name].max + 1e-9).any()):
                return name
        return None

    def share(self, queue: str) -> float:
        """The queue's dominant share of its deserved amount (kept until its usage changes)."""
        found = self._shares.get(queue)
        if found is None:
            found = dominant_share(self.usage.get(queue, _ZERO), self.deserved.get(queue, _ZERO))
            self._shares[queue] = found
        return found

    def below_deserved(self, job: Job, replicas: int) -> bool:
        """Whether the job's queue stays within its deserved share with ``replicas`` more tasks."""
        q = self.queue_of(job)
        if not q:
            return False
        u, d, s = self.usage.get(q, _ZERO), self.deserved.get(q, _ZERO), job.shape
        return (
            u[0] + s.total_gpu_milli * replicas <= d[0] + 1e-9
            and u[1] + s.cpu_milli * replicas <= d[1] + 1e-9
            and u[2] + s.memory_mib * replicas <= d[2] + 1e-9
        )

    def within_guarantee(self, job: Job, replicas: int) -> bool:
        """Whether the job's queue stays within its guarantee with ``replicas`` more tasks, in
        every dimension the guarantee names (what reclaim may take back for it)."""
        spec = self.queues.specs.get(job.queue)
        if spec is None:
            return False
        u, s = self.usage.get(job.queue, _ZERO), job.shape
        need = (s.total_gpu_milli * replicas, s.cpu_milli * replicas, s.memory_mib * replicas)
        named = False
        for d in range(3):
            g = float(spec.guarantee[d])
            if g > 0:
                if u[d] + need[d] > g + 1e-9:
                    return False
                named = named or need[d] > 0
        return named

    def borrowed(self, queue: str) -> tuple[float, float, float]:
        """What the queue uses beyond its guarantee, per dimension (0 where it is within)."""
        spec = self.queues.specs.get(queue)
        u = self.usage.get(queue, _ZERO)
        if spec is None:
            return (0.0, 0.0, 0.0)
        g = spec.guarantee
        return (max(0.0, u[0] - float(g[0])), max(0.0, u[1] - float(g[1])), max(0.0, u[2] - float(g[2])))

    # -- reservations ------------------------------------------------------------------------
    def _rebuild_reserved(self) -> None:
        self._reserved_by[:] = -1
        self._reservation_ids = list(self.reservations)
        for k, job in enumerate(self._reservation_ids):
            for node in self.reservations[job].nodes:
                if 0 <= node < self.cluster.size and self._reserved_by[node] < 0:
                    self._reserved_by[node] = k

    def reserved_mask(self) -> BoolArray:
        """Nodes held for blocked jobs as they free up, a preemption's nodes included: room there
        that its victims free (or that was free already) is its preemptors' alone, as Kubernetes
        counts a nominated pod on its node.  Letting others take the part already free starved
        8-GPU preemptors live (bench_preemption: 16 of 200 never started, their nodes' first
        freed GPUs taken by 1-GPU jobs)."""
        mask: BoolArray = self._reserved_by >= 0
        return mask

    def open_to(self, job: Job, backfill_end: float | None = None) -> BoolArray:
        """Nodes ``job`` may use: unreserved ones, its own reservation's, and (``backfill_end``:
        when it would end) those whose reservation starts only after that."""
        mask: BoolArray = self._reserved_by < 0
        own = self.reservations.get(job.id)
        if own is not None:
            mask = mask.copy()
            mask[list(own.nodes)] = True
        if backfill_end is not None:
            for k, rid in enumerate(self._reservation_ids):
                r = self.reservations[rid]
                if not r.preemption and r.expected_start >= backfill_end:
                    mask = mask | (self._reserved_by == k)
        if not self._all_schedulable:
            mask = mask & self.cluster.schedulable  # cordoned and NotReady nodes take nothing new
        return mask

    def spared(self, shape: TaskShape) -> BoolArray | None:
        """The nodes a task of ``shape`` keeps off while it fits elsewhere: the scarce homes of
        waiting jobs more constrained than it (``shared/core/homes.py``); None when there are none."""
        if not self.config.spare_scarce_homes:
            return None
        if self._homes is None:
            memo = self.snapshot.memo
            kept = memo.homes if memo is not None and isinstance(memo.homes, HomeIndex) else None
            index = home_index(self.cluster, self.config.profile, kept)
            delta = self.snapshot.pending_delta
            if delta is not None and kept is index and index.generation == delta.previous:
                index.follow(self.cluster, delta)
            else:
                generation = delta.generation if delta is not None else -1
                index.rebuild(self.cluster, self.snapshot.pending, generation)
            if memo is not None:
                memo.homes = index
            self._homes = (index, HomeLadder.of(index, self.cluster, set(index.scarce.values())))
        index, ladder = self._homes
        return ladder.spared_from(index, self.cluster, shape)

    def restriction(self, job: Job) -> BoolArray | None:
        """:meth:`open_to`, or None when nothing restricts ``job`` (no reservation held, every
        node schedulable): the common case skips building the mask."""
        if not self.reservations and self._all_schedulable:
            return None
        return self.open_to(job)

    def leaving_on(self, node: int) -> list[Placement]:
        """The tasks on ``node`` on their way out."""
        return self.leaving_at.get(node, [])

    def hold(self, reservation: Reservation) -> None:
        known = self.reservations.get(reservation.job)
        self.reservations[reservation.job] = reservation
        self._rebuild_reserved()
        self.changed_holds.update(reservation.nodes)
        if known is not None:
            self.changed_holds.update(known.nodes)
        if known != reservation:
            # One Reserve per job and cycle, the last: a reservation made earlier in this cycle
            # and replaced now (a blocked job that reserved in allocate, then found victims) was
            # never seen outside, and announcing both cost a wasted event live.
            stale = [
                k
                for k, i in enumerate(self.intents)
                if isinstance(i, Reserve) and i.reservation.job == reservation.job
            ]
            for k in reversed(stale):
                del self.intents[k]
            self.intents.append(Reserve(reservation))
        self.wake(reservation.timeout_at)

    def drop_reservation(self, job: str) -> Reservation | None:
        found = self.reservations.pop(job, None)
        if found is not None:
            self._rebuild_reserved()
            self.changed_holds.update(found.nodes)
            self.reservations_full = False
            held = self.counted.pop(job, 0)
            if held:
                self.add_usage(self.pending_by_id[job], held, -1.0)
        return found

    def wake(self, at: float) -> None:
        if at > self.now:
            self.wake_at = min(self.wake_at, at)

    # -- outcomes ----------------------------------------------------------------------------
    def estimate(self, job: Job) -> float:
        """The estimator's run time for ``job``, asked once per cycle."""
        found = self._estimates.get(job.id)
        if found is None:
            found = self._estimates[job.id] = self.snapshot.estimator.estimate(job)
        return found

    def capacity(self) -> tuple[float, float, float]:
        """The cluster's milli-GPU, milli-CPU and MiB (asked for once per cycle)."""
        if self._capacity is None:
            c = self.cluster
            self._capacity = (float(c.total_gpu_milli), float(c.cpu_cap.sum()), float(c.mem_cap.sum()))
        return self._capacity

    def dominant(self, demand: tuple[float, float, float]) -> float:
        """DRF's size of ``demand`` (milli-GPU, milli-CPU, MiB): its largest share of the
        cluster's capacity."""
        return max((d / t for d, t in zip(demand, self.capacity(), strict=True) if t > 0), default=0.0)

    def held_reservations(self) -> int:
        return sum(1 for r in self.reservations.values() if not r.preemption)

    def actionable(self, job: Job) -> bool:
        allowed = self.snapshot.actionable
        return allowed is None or job.id in allowed

    def leaves_at(self, r: Running) -> float:
        """When a running job is expected to free its room: within the grace if it is being
        evicted, else at its expected end."""
        if r.job.id in self.evicting:
            return self.now + self.config.grace_s
        return self.snapshot.estimator.expected_end(r, self.now)

    def placed_until(self, job_id: str) -> float:
        """When a job this cycle placed is expected to end."""
        job = self.pending_by_id.get(job_id)
        return self.now + (self.estimate(job) if job is not None else self.snapshot.estimator.default_s)

    def record_place(self, job: Job, placements: list[Placement]) -> None:
        self.placed[job.id] = placements
        self.touched.update(p.node for p in placements)
        self.changed_holds.update(p.node for p in placements)
        self.intents.append(Place(job.id, tuple(placements)))
        if self.release is not None:  # the new tasks hold room until their expected end
            end = self.placed_until(job.id)
            for p in placements:
                rows = self.release.setdefault(p.node, [])
                rows.append(release_row(end, p))
                rows.sort()
        self.add_usage(job, len(placements) - self.counted.pop(job.id, 0))
        self.unschedulable.pop(job.id, None)
        self.drop_reservation(job.id)

    def refuse(self, job: Job, status: Status) -> None:
        self.unschedulable[job.id] = status

    def finish(self) -> CycleResult:
        return CycleResult(
            intents=self.intents,
            placed=self.placed,
            unschedulable=self.unschedulable,
            touched=self.touched,
            reservations=dict(self.reservations),
            backoff=dict(self.backoff),
            wake_at=self.wake_at,
        )


QUEUE_MAX = Status(Code.UNSCHEDULABLE, "QueueMax", "its queue (or a parent) would exceed its max quota")
BEHIND_HEAD = Status(Code.UNSCHEDULABLE, "StrictOrder", "an earlier job does not fit (strict order)")
BUDGET = Status(Code.UNSCHEDULABLE, "CycleBudget", "the cycle placed its most jobs; next cycle")
DEPTH = Status(Code.UNSCHEDULABLE, "QueueDepth", "beyond the jobs a cycle looks at; a later cycle will")
