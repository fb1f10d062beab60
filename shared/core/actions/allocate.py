"""Stage 2, allocate: place pending jobs, queue by queue in DRF order, all replicas or none.

0. Jobs holding a reservation are offered first: a preemptor the room its victims freed, a large
   job the nodes held for it.
1. Every queue with waiting jobs is a candidate; the one with the lowest dominant share of its
   deserved amount (usage / deserved, DRF) offers its next job in order, and its share is
   recomputed after each placement, so queues interleave (Volcano's allocate with drf and
   proportion).  Without fair share all jobs form one order.
2. A job that would take its queue, or a parent, past ``max`` waits (``QueueMax``).
3. The job's fewest replicas are placed all or nothing, then more up to its size (elastic,
   gang with ``min-member`` below replicas).  Nodes reserved for other jobs are closed to it.
4. A job that does not fit: in a strict order, nothing after it is tried; otherwise the next.
   A blocked job (by default the first, EASY's head of the queue) reserves the nodes where it
   would start first (``actions/reserve.py``); a held reservation that is past its timeout is
   released and the job backs off, and one held for a lower priority than a blocked job of its
   queue is released to that job (no back-off).  A placement worker acts only on its own jobs, but another
   worker's job that has no room still takes EASY's slot (its worker reserves it).
5. Once a shape failed with ``k`` replicas on the open nodes, later jobs of that shape with ``k``
   or more replicas fail the same way without a search: the copy only fills up during allocate.
   ``queue_depth`` bounds the jobs searched, so such jobs do not count towards it.
"""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np

from shared.core.actions import reserve
from shared.core.actions.context import BEHIND_HEAD, BUDGET, DEPTH, QUEUE_MAX, CycleContext
from shared.core.actions.placing import place_replicas
from shared.core.cycle import Release
from shared.core.framework import Code, Status
from shared.core.jobs import Job
from shared.core.task import TaskShape


def run(ctx: CycleContext) -> None:
    _expire_reservations(ctx)
    if ctx.reservations:
        reserve.refresh(ctx)
    # 0. Jobs holding a reservation go first (victims' room to their preemptor, then the
    #    reservations of large jobs in the order they were made), so no one takes the room
    #    freed for them.
    failed: dict[TaskShape, tuple[int, Status]] = {}
    holders = sorted(
        (r for r in ctx.reservations.values() if r.job in ctx.pending_by_id),
        key=lambda r: (not r.preemption, r.since, r.job),
    )
    claims = Counter(n for r in holders if r.preemption for n in r.nodes)
    for r in holders:
        job = ctx.pending_by_id[r.job]
        if ctx.actionable(job) and ctx.within_max(job, job.fewest):
            # open_to: its own nodes and unreserved ones, never a node only others hold.  On a
            # node it shares with other preemptors it takes its fewest replicas, what it
            # claimed there; an elastic job grows later into room no one waits for.
            most = job.fewest if any(claims[n] > 1 for n in r.nodes) else job.replicas
            placements, _ = place_replicas(ctx, job, job.fewest, most, ctx.open_to(job))
            if placements:
                ctx.record_place(job, placements)
    heap: list[tuple[float, str]] = [(ctx.share(q), q) for q, jobs in ctx.ordered.items() if jobs]
    heapq.heapify(heap)
    cursor = dict.fromkeys(ctx.ordered, 0)
    while heap:
        _, q = heapq.heappop(heap)
        jobs = ctx.ordered[q]
        if ctx.stopped:
            # Strict order (or the cycle's budget) ended the stage: the rest waits, unsearched.
            for job in jobs[cursor[q] :]:
                if ctx.actionable(job):
                    ctx.unschedulable[job.id] = ctx.stopped
            continue
        # A job that does not fit leaves every share as it was, so this queue stays the one
        # furthest below its share until one of its jobs is placed: offer them in a row.
        placed_before = len(ctx.placed)
        while cursor[q] < len(jobs) and len(ctx.placed) == placed_before and not ctx.stopped:
            job = jobs[cursor[q]]
            cursor[q] += 1
            _offer(ctx, job, failed)
        if cursor[q] < len(jobs):
            heapq.heappush(heap, (ctx.share(q), q))  # the share moved if the job was placed


def _offer(ctx: CycleContext, job: Job, failed: dict[TaskShape, tuple[int, Status]]) -> None:
    if job.id in ctx.placed:
        return  # a reservation holder, placed in step 0
    known = failed.get(job.shape)
    if known is not None and job.fewest >= known[0] and job.id not in ctx.reservations:
        if ctx.actionable(job):
            _blocked(ctx, job, known[1])  # the hot path of a busy cycle: no search
        elif ctx.config.reserve and not ctx.reservations_full:
            reserve.consider(ctx, job)  # another worker's: it may take EASY's slot
        return
    # queue_depth counts the jobs searched, not those a failed shape already decided: counted,
    # one queue's jobs that cannot fit spent the depth before any other queue had a turn.
    depth = ctx.config.queue_depth
    if depth is not None:
        ctx.considered += 1
        if ctx.considered > depth:
            ctx.stopped = DEPTH
            ctx.unschedulable[job.id] = DEPTH
            return
    limit = ctx.config.max_jobs
    if not ctx.actionable(job):
        # Another worker's job is only tested for room, never placed here; without room it
        # may take EASY's slot (``reserve.consider``).
        if ctx.config.reserve and not ctx.reservations_full and not _may_fit(ctx, job):
            reserve.consider(ctx, job)
        return
    if limit is not None and len(ctx.placed) >= limit:
        ctx.stopped = BUDGET  # the cycle's budget is spent: the rest waits for the next one
        return
    own = ctx.reservations.get(job.id)
    if not ctx.within_max(job, job.fewest):
        ctx.refuse(job, _over_max(ctx, job))
        return
    open_nodes = ctx.restriction(job)
    placements, status = place_replicas(ctx, job, job.fewest, job.replicas, open_nodes)
    if status is None:
        ctx.record_place(job, placements)
        return
    if own is None and (job.shape not in failed or job.fewest < failed[job.shape][0]):
        failed[job.shape] = (job.fewest, status)
    _blocked(ctx, job, status)


def _blocked(ctx: CycleContext, job: Job, status: Status) -> None:
    ctx.unschedulable[job.id] = status
    ctx.blocked.append(job)
    if ctx.config.reserve and (not ctx.reservations_full or reserve.outranked(ctx, job) is not None):
        reserve.consider(ctx, job)
    if ctx.config.strict:
        ctx.stopped = BEHIND_HEAD


def _over_max(ctx: CycleContext, job: Job) -> Status:
    """QueueMax, saying so where the job alone is above a max (it waits for a tree that raises it)."""
    queue = ctx.above_max_alone(job, job.fewest)
    if queue is None:
        return QUEUE_MAX
    reason = (
        f"needs more than queue {queue!r}'s max even with nothing else running: "
        "it waits for a tree that raises it"
    )
    return Status(Code.UNSCHEDULABLE, QUEUE_MAX.plugin, reason)


def _may_fit(ctx: CycleContext, job: Job) -> bool:
    """Whether the open nodes have room for the job's fewest replicas, counted per node (without
    the scorers' search: another worker's job is only tested, never placed here)."""
    mask, status = ctx.config.profile.feasible(ctx.cluster, job.shape)
    if not status.ok:
        return False
    restriction = ctx.restriction(job)
    if restriction is not None:
        mask = mask & restriction
    need, c = job.fewest, ctx.cluster
    for node in np.flatnonzero(mask).tolist():
        gpus: list[int] = c.gpu_free[node].tolist()
        need -= reserve.fit_count(int(c.cpu_free[node]), int(c.mem_free[node]), gpus, job.shape)
        if need <= 0:
            return True
    return False


def _expire_reservations(ctx: CycleContext) -> None:
    """Release reservations past their timeout; the job may not reserve again for as long."""
    for job_id, r in list(ctx.reservations.items()):
        if ctx.now < r.timeout_at:
            continue
        ctx.drop_reservation(job_id)
        if r.preemption:  # its victims did not leave in time: try again from scratch
            ctx.intents.append(Release(job_id, "timeout: the victims did not leave in time", ctx.now))
            continue
        length = max(1.0, r.timeout_at - r.expected_start)
        ctx.backoff[job_id] = ctx.now + length
        ctx.wake(ctx.now + length)
        ctx.intents.append(Release(job_id, "timeout: not started in time", ctx.now + length))
