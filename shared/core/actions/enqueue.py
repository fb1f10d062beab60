"""Stage 1, enqueue: queue usage, demand and deserved shares; each queue's jobs in order.

1. Usage of each leaf queue: what its running jobs hold (victims already being evicted still
   hold it until they are gone), and the lowest priority running in each (preemption's gate).
2. Demand: usage plus every pending job's fewest replicas; the tree's water-filling of the
   cluster's capacity gives each queue its deserved share (``QueueTree.deserved``).
3. Each leaf's pending jobs sorted by the order plugin's key (orders that use expected run
   times ask the estimator).
4. A job the tree bars is not offered and asks for nothing: it waits, said why, until a tree
   lets it in.  That is a job whose queue is not in the tree (``QueueGone``), or whose tenant the
   queue or one above it no longer allows (``TenantBarred``): a tree applied after admission
   changed them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from shared.core.actions.context import CycleContext
from shared.core.cycle import Release
from shared.core.framework import Code, Status
from shared.core.jobs import Job, Running, RuntimeEstimator
from shared.core.memo import PendingDelta
from shared.core.plugins.order.base import JobOrder
from shared.core.queues import QueueTree, vector


def run(ctx: CycleContext) -> None:
    queues = ctx.queues
    held: dict[str, list[float]] = {}
    floor: dict[str, int] = {}
    outgoing: list[Running] = []  # with an eviction or shrink in flight
    for r in ctx.snapshot.running:
        q, d, p = r.job.queue, r.demand, r.job.priority
        acc = held.get(q)
        if acc is None:
            acc = held[q] = [0.0, 0.0, 0.0]
        if r.leaving:
            outgoing.append(r)
        acc[0] += d[0]
        acc[1] += d[1]
        acc[2] += d[2]
        if p < floor.get(q, p + 1):
            floor[q] = p
    if floor:
        floor[""] = min(floor.values())
    ctx.lowest = floor
    for q, acc in held.items():
        if q in queues.specs:
            ctx.usage[q] = acc
    for r in outgoing:  # only the tasks that stay are the queue's; its max counts them all
        ctx.add_leaving(r.job, r.leaving)
    kept = _pending_order(ctx)
    sums = kept.sums
    demand = {q: vector(*u) for q, u in ctx.usage.items()}
    for q, acc in sums.items():
        if q in queues.specs:
            demand[q] = demand.get(q, vector()) + vector(*acc)
    if ctx.config.fair_share or ctx.config.elastic:
        # Only DRF turns and elastic growth read deserved shares (reclaim reads guarantees):
        # one queue in one order, as the fill protocol and FIFO run, skips the water-filling.
        capacity = vector(*ctx.capacity())
        ctx.deserved = {
            q: (float(d[0]), float(d[1]), float(d[2])) for q, d in queues.deserved(capacity, demand).items()
        }
    # A preemptor's room is its queue's from the moment its victims are asked to leave, as the
    # cycle that chose them counted it (preempt.commit); its demand above already includes it.
    for job_id, reservation in ctx.reservations.items():
        if reservation.preemption:
            ctx.count_held(ctx.pending_by_id[job_id])
    for q, members in kept.members.items():
        if kept.held and (q == "" or q == "*"):  # "": fair share's group of the jobs the tree bars
            _wait_for_tree(ctx, kept, [j for j in members if kept.bar(j) is not None])
            if q == "":
                continue
            members = [j for j in members if kept.bar(j) is None]
        ctx.ordered[q] = list(members)


def _wait_for_tree(ctx: CycleContext, kept: PendingOrder, jobs: list[Job]) -> None:
    """Jobs the tree bars (an applied tree dropped their queue, or no longer allows their tenant
    on it, after they were admitted) wait, said why, until a tree lets them in: placed anyway,
    a job without a queue would escape every quota, and a tenant whose rights were taken would
    keep using them.  Kueue holds a workload whose ClusterQueue is gone the same way.  A
    reservation one of them holds is released (allocate would place its holder first)."""
    for job in jobs:
        barred = kept.bar(job)
        if barred is None or not ctx.actionable(job):
            continue
        plugin, why = barred
        reason = f"{why}: it waits until a tree lets it in"
        ctx.unschedulable[job.id] = Status(Code.UNSCHEDULABLE, plugin, reason)
        if ctx.drop_reservation(job.id) is not None:
            ctx.intents.append(Release(job.id, reason, ctx.now))


@dataclass
class PendingOrder:
    """The pending jobs' demand per queue name and their order per group (a queue under fair
    share, else one group), as of the snapshot numbered ``generation``.  A shell that says how
    its pending jobs changed (``PendingDelta``) keeps it in its memo between cycles, for orders
    whose key reads the job alone: a cycle then sorts in the jobs that arrived instead of the
    thousands that wait (on Philly's backlog, sorting and summing them was a third of a cycle).
    Demand sums are integers held in floats, so adding and taking away jobs is exact: the
    followed state equals a fresh one (a test checks it)."""

    generation: int
    order: JobOrder
    fair_share: bool
    queues: QueueTree
    jobs: dict[str, Job] = field(default_factory=dict)
    sums: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    keys: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    members: dict[str, list[Job]] = field(default_factory=dict)
    held: int = 0  # pending jobs the tree bars (kept in the order, offered to no one)

    def bar(self, job: Job) -> tuple[str, str] | None:
        """(plugin, why) where the tree bars the job (``QueueTree.barred``), else None."""
        return self.queues.barred(job.queue, job.tenant)

    def group(self, job: Job) -> str:
        if not self.fair_share:
            return "*"
        return job.queue if self.bar(job) is None else ""

    def count(self, job: Job, sign: int = 1) -> None:
        """Add (``sign`` 1) or take away (-1) the job's fewest replicas in its queue's sums; a
        queue's entry goes when its last pending job does.  A job the tree bars asks for
        nothing: it is only counted as held."""
        if self.bar(job) is not None:
            self.held += sign
            return
        q, s, k = job.queue, job.shape, sign * job.fewest
        acc = self.sums.get(q)
        if acc is None:
            acc = self.sums[q] = [0.0, 0.0, 0.0]
            self.counts[q] = 0
        acc[0] += s.total_gpu_milli * k
        acc[1] += s.cpu_milli * k
        acc[2] += s.memory_mib * k
        self.counts[q] += sign
        if not self.counts[q]:
            del self.sums[q], self.counts[q]

    def add(self, job: Job, now: float, estimator: RuntimeEstimator) -> None:
        self.jobs[job.id] = job
        self.count(job)
        g = self.group(job)
        keys = self.keys.setdefault(g, [])
        members = self.members.setdefault(g, [])
        key = self.order.key(job, now, estimator)
        at = bisect.bisect_right(keys, key)
        keys.insert(at, key)
        members.insert(at, job)

    def follow(self, delta: PendingDelta, now: float, estimator: RuntimeEstimator) -> bool:
        """Apply ``delta``; False if it does not fit what is kept (then build afresh)."""
        leaving: dict[str, set[str]] = {}
        for job_id in delta.removed:
            job = self.jobs.pop(job_id, None)
            if job is None:
                return False
            self.count(job, -1)
            leaving.setdefault(self.group(job), set()).add(job_id)
        for g, ids in leaving.items():
            keep = [i for i, j in enumerate(self.members[g]) if j.id not in ids]
            self.keys[g] = [self.keys[g][i] for i in keep]
            self.members[g] = [self.members[g][i] for i in keep]
            if not keep:
                del self.keys[g], self.members[g]
        for job in delta.added:
            if job.id in self.jobs:
                return False
            self.add(job, now, estimator)
        self.generation = delta.generation
        return True


def _pending_order(ctx: CycleContext) -> PendingOrder:
    """The pending jobs' demand and order: followed from the memo where the shell says how the
    pending jobs changed, else built afresh (and kept where it can be followed)."""
    snapshot, config = ctx.snapshot, ctx.config
    memo, delta = snapshot.memo, snapshot.pending_delta
    followable = memo is not None and delta is not None and config.order.static
    kept = memo.pending_order if memo is not None else None
    if (
        followable
        and isinstance(kept, PendingOrder)
        and delta is not None
        and kept.generation == delta.previous
        and kept.order is config.order
        and kept.fair_share == config.fair_share
        and kept.queues is ctx.queues
        and kept.follow(delta, ctx.now, snapshot.estimator)
        and len(kept.jobs) == len(snapshot.pending)
    ):
        return kept
    fresh = PendingOrder(-1, config.order, config.fair_share, ctx.queues)
    order, est, now = config.order, snapshot.estimator, ctx.now
    grouped: dict[str, list[Job]] = {}
    for job in snapshot.pending:
        fresh.jobs[job.id] = job
        fresh.count(job)
        grouped.setdefault(fresh.group(job), []).append(job)
    for q, group in grouped.items():  # one sort per group, not an insertion per job
        decorated = sorted((order.key(j, now, est), n, j) for n, j in enumerate(group))
        fresh.keys[q] = [k for k, _, _ in decorated]
        fresh.members[q] = [j for _, _, j in decorated]
    if memo is not None:
        memo.pending_order = None
        if followable and delta is not None:
            fresh.generation = delta.generation
            memo.pending_order = fresh
    return fresh
