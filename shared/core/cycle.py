"""One scheduling cycle: ``run_cycle(snapshot, config, now, rng) -> CycleResult``.

The only entry point through which anything is scheduled: the offline simulator (``fill`` and
``timeline``) and the live placement workers call it, so they cannot disagree.  Pure: it reads
its arguments, never the clock or the environment, and writes nothing; the same inputs and seed
give the same intents.

Stages run in order over one private copy of the cluster, each staging its changes in a
:class:`~shared.core.statement.Statement` committed or discarded whole (Volcano's actions):

1. **enqueue** (``actions/enqueue.py``): each queue's usage, demand and deserved share (the
   tree's water-filling); the pending jobs of each queue in the order plugin's order; jobs that
   would take their queue (or an ancestor) past its ``max`` wait with ``queue-max``.
2. **allocate** (``actions/allocate.py``): repeatedly the queue furthest below its deserved
   share (DRF) offers its next job; the job's fewest replicas are placed all or nothing, an
   elastic job takes more up to its size; reserved nodes are closed to other jobs.  A large
   blocked job reserves the nodes where it will start first (``actions/reserve.py``); a
   strict-FIFO policy stops at the first job that does not fit.
3. **preempt / reclaim** (``actions/preempt.py``): a blocked job may evict lower-priority work of
   its own queue, anyone's once it waited past its queue's ``preempt-after``, and borrowed
   work of queues above their deserved share while its own queue is below; victims minimise
   (priority, GPU-time lost, number of victims, GPU left over); elastic jobs shrink instead.
4. **backfill** (``actions/backfill.py``): a blocked job may use reserved room if it is expected
   to end before the reservation starts (EASY); running elastic jobs then grow into idle room.

The result is a list of intents; the shell turns them into events (or simulated effects) and
nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from shared.core.cluster import BoolArray, ClusterState, Placement
from shared.core.framework import Profile, ReadsBacklog, Status
from shared.core.jobs import Job, Reservation, Running, RuntimeEstimator
from shared.core.memo import CycleMemo, PendingDelta, RunningDelta
from shared.core.plugins.order.base import JobOrder
from shared.core.plugins.order.priority_age import PriorityAge
from shared.core.queues import QueueTree, open_tree


# -- intents -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Place:
    """Start ``job`` with these placements (one per task, task i = placements[i])."""

    job: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold ``nodes`` for ``job`` (new or renewed); see :class:`~shared.core.jobs.Reservation`."""

    reservation: Reservation


@dataclass(frozen=True, slots=True)
class Release:
    """Give up ``job``'s reservation; it may not reserve again before ``backoff_until``."""

    job: str
    reason: str
    backoff_until: float


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict ``victim`` (all its tasks) for ``by``; it may checkpoint within ``grace_s``."""

    victim: str
    by: str
    grace_s: float
    reason: str
    lost_gpu_s: float


@dataclass(frozen=True, slots=True)
class Resize:
    """Change a running elastic job to ``replicas`` tasks: ``added`` placements start new
    tasks (numbered after the existing ones), ``removed`` tasks (the highest-numbered) stop."""

    job: str
    replicas: int
    added: tuple[Placement, ...] = ()
    removed: tuple[int, ...] = ()
    by: str = ""


@dataclass(frozen=True, slots=True)
class Unschedulable:
    job: str
    status: Status


Intent = Place | Reserve | Release | Preempt | Resize | Unschedulable
AnIntent = TypeVar("AnIntent", Place, Reserve, Release, Preempt, Resize, Unschedulable)


# -- inputs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """Everything a decision may read.  ``cluster`` already holds the running jobs' resources."""

    cluster: ClusterState
    pending: Sequence[Job]
    running: Sequence[Running] = ()
    queues: QueueTree | None = None  # None: one open queue per queue name the jobs use
    reservations: Mapping[str, Reservation] = field(default_factory=dict)
    backoff: Mapping[str, float] = field(default_factory=dict)  # job -> may reserve again at
    estimator: RuntimeEstimator = field(default_factory=RuntimeEstimator)
    actionable: frozenset[str] | None = None
    """Jobs this caller may act on (a placement worker's own work items); None: all.  The others
    still count for queue shares and orders."""
    preferred: BoolArray | None = None
    """Nodes to try first (a worker's own share), then any node."""
    memo: CycleMemo | None = None
    """Kept by a shell that runs cycle after cycle (``shared/core/memo.py``): speeds the next
    cycle up, never changes what it decides."""
    running_delta: RunningDelta | None = None
    """How ``running`` differs from the shell's previous snapshot (None: not known)."""
    pending_delta: PendingDelta | None = None
    """How ``pending`` differs from the shell's previous snapshot (None: not known)."""


@dataclass(frozen=True)
class CycleConfig:
    """A policy: the placement profile and which stages do what.  The baselines of the timeline
    simulator are configurations of this one cycle (``shared/sim/policies.py``)."""

    profile: Profile
    order: JobOrder = field(default_factory=PriorityAge)
    fair_share: bool = True
    """Queues take turns by DRF against their deserved share; False: one order over all jobs."""
    strict: bool = False
    """Stop at the first job that does not fit (FIFO's head-of-line blocking)."""
    reserve: bool = True
    max_reservations: int = 1
    """Reservations held at once.  One, as in EASY backfill (Slurm): the first blocked job in
    the cycle's order (under DRF, the most under-served queue's) holds where it will start, and
    everything else may run around it only if it does not delay it.  Each further reservation
    idles more room for a start further away; four (for jobs of 8 GPUs or more) did worse than
    one on Philly (JCT 175 h against 161 h, Jain 0.918 against 0.954, utilisation 83.8% against
    84.8%) and on openb (8-GPU p95 wait 25.6 h against 15.2 h; JCT equal)."""
    reserve_min_gpus: float = 0.0
    """Jobs at least this large (GPUs of one full run) reserve when blocked... (0: any job,
    EASY's head of the queue)"""
    reserve_after_s: float = 0.0
    """... and so does any job blocked this long."""
    reserve_timeout_s: float = 3600.0
    """How long past its expected start a non-gang reservation is held (gangs: their timeout)."""
    reservations_yield: bool = True
    """A held reservation yields, without back-off, to a blocked job of its queue with a strictly
    higher priority (``actions/reserve.py``, ``outranked``); off, it is held until its job starts
    or times out, as plain EASY over a FIFO order does."""
    backfill: bool = True
    spare_scarce_homes: bool = True
    """A task keeps off the only nodes a more constrained waiting job can run on (fewer nodes
    hold one of its tasks: a GPU model few nodes have, more cores than most have) while it fits
    elsewhere (``shared/core/homes.py``).  Off for the baselines and the fill protocol."""
    preempt: bool = True
    reclaim: bool = True
    consolidate: bool = True
    """Move small checkpointable jobs to free room elsewhere when that gives the blocked job
    holding the reservation the nodes it needs (``shared/core/actions/consolidate.py``)."""
    consolidate_share: float = 0.5
    """The GPUs moved for one job at most, as a share of its own GPUs (so each job moved is
    at most half its size): moves serve jobs far larger than what they move."""
    elastic: bool = True
    grace_s: float = 30.0
    """Checkpointable victims' time to checkpoint (others are stopped at once)."""
    restart_overhead_s: float = 60.0
    """What a checkpointed victim loses: the time to save and reload (GPU-seconds per GPU)."""
    min_runtime_s: float = 600.0
    """A job that started less than this long ago is not evicted."""
    weigh_loss: bool = True
    """Evict only when the work the victims lose (since their last checkpoint) is no more than
    what waiting for room would cost the preemptor: its size times its whole wait, the time it
    has waited plus the time until its earliest slot by the run-time estimates.  Sizes are
    dominant shares (DRF: a job's largest share of the cluster's GPUs, CPUs or memory), so CPU
    jobs are weighed as GPU jobs are; reclaim within a guarantee is never weighed."""
    max_preemptions: int = 3
    """A job preempted this often is not evicted again (no preemption loops)."""
    spread_evictions: bool = True
    """Among victims that tie on everything the issue's order weighs (priority, work lost,
    number of victims, fragmentation), take those evicted least so far.  A job evicted
    ``max_preemptions`` times may not be evicted again, so its node is closed to any preemptor
    that needs the whole node (on one Philly draw with the large-jobs settings such jobs sat on
    24-25 of the 26 nodes for four weeks while gangs of 16-32 GPUs found no victims).  With the
    large-jobs settings it halved the gangs' p95 wait; on Philly as defined it cost a tenth of the
    8-GPU p95 (docs/results/timeline/history.md, twenty-seventh stop).  Off for the baselines."""
    share_preempted_nodes: bool = True
    """Several preemptors may wait on one node, each counting only the room left after those
    before it (``actions/stacking.py``); off, a preemption reservation closes its node to every
    other preemptor, and reclaiming many small jobs takes one eviction per node per round.  Off
    for the baselines: ``las`` with it measured a higher JCT on Philly (86 h against 80 h,
    median of five draws), and the comparison keeps the stronger baseline."""
    max_preemptors: int = 16
    max_jobs: int | None = None
    """Jobs placed per cycle at most (None: no limit)."""
    queue_depth: int | None = None
    """Pending jobs a cycle searches room for, at most, in its order (Slurm's
    ``default_queue_depth``): bounds a cycle's cost when thousands wait; the rest wait for a
    later cycle (None: all).  A job whose shape already failed in the cycle is decided without
    a search and does not count: counted, the jobs of the queue furthest below its share that
    could not fit spent the whole depth, and no other queue was looked at
    (docs/results/timeline/history.md, twenty-eighth stop)."""


# -- output --------------------------------------------------------------------------------------
@dataclass
class CycleResult:
    intents: list[Intent] = field(default_factory=list)
    """What to do, in order.  The jobs left waiting are in ``unschedulable`` (with why), not
    here: thousands of them wait in a busy cycle, and most shells only count them."""
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    unschedulable: dict[str, Status] = field(default_factory=dict)
    touched: set[int] = field(default_factory=set)  # node indices whose state the cycle changes
    reservations: dict[str, Reservation] = field(default_factory=dict)  # held after the cycle
    backoff: dict[str, float] = field(default_factory=dict)
    wake_at: float = float("inf")
    """The earliest moment a rule that depends on time (a reservation's timeout, a backoff, a
    victim's minimum run time, a queue's preempt-after) changes: the shell should run a cycle then
    even if nothing else happens."""

    def of(self, kind: type[AnIntent]) -> list[AnIntent]:
        """The intents of one kind, in order."""
        return [i for i in self.intents if isinstance(i, kind)]

    def all_intents(self) -> list[Intent]:
        """``intents`` followed by one ``Unschedulable`` per job left waiting."""
        return [*self.intents, *(Unschedulable(j, s) for j, s in self.unschedulable.items())]


def run_cycle(snapshot: Snapshot, config: CycleConfig, now: float, rng: np.random.Generator) -> CycleResult:
    from shared.core.actions import allocate, backfill, consolidate, enqueue, preempt
    from shared.core.actions.context import CycleContext

    queues = snapshot.queues
    if queues is None:
        names = {j.queue for j in snapshot.pending} | {r.job.queue for r in snapshot.running}
        queues = open_tree(sorted(names) or ["default"])
    if snapshot.memo is not None:
        preempt.follow_memo(snapshot)
    ctx = CycleContext(snapshot, config, now, rng, queues)
    if isinstance(config.profile.scorer, ReadsBacklog):
        config.profile.scorer.begin_cycle(snapshot.pending, now)
    enqueue.run(ctx)
    allocate.run(ctx)
    if not config.strict:
        preempt.run(ctx)
        consolidate.run(ctx)
        backfill.run(ctx)
    return ctx.finish()
