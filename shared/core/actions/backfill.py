"""Stage 4, backfill (EASY, as Slurm's) and elastic growth.

1. Each job allocate could not place (in its order, skipping those with victims leaving) may
   use reserved nodes whose reservation starts after the job is expected to end: its
   ``duration-s``, else the estimator's learnt run time for its tenant and shape.  Reservations
   made for preemptions are never backfilled (their room is freed for one job).
2. Running elastic jobs below their size grow one replica at a time into unreserved idle room
   (queues furthest below their deserved share first), never past their queue's ``max``.  Only
   checkpointable ones: a grow restarts every replica at the new size (torchrun's elastic agent
   restarts all workers when the membership changes), and a job that cannot checkpoint would
   start over.  Where the caller acts on some jobs only (one of several placement workers), no
   job grows while a waiting job of another caller could start in the room left: that room is
   about to be given to it, and growth takes only what nobody waiting can use.
"""

from __future__ import annotations

from shared.core.actions.context import CycleContext
from shared.core.actions.placing import decide_one, place_replicas
from shared.core.cycle import Resize
from shared.core.framework import Code
from shared.core.jobs import Job


def run(ctx: CycleContext) -> None:
    if ctx.config.backfill and ctx.reservations:
        _backfill(ctx)
    if ctx.config.elastic:
        _grow(ctx)


def _backfill(ctx: CycleContext) -> None:
    # A job can only backfill if it ends before the latest reservation starts; once a shape
    # failed to backfill by some end, a job of that shape ending later fails too (its mask is
    # a subset) and is not searched.
    latest = max((r.expected_start for r in ctx.reservations.values() if not r.preemption), default=-1.0)
    failed: dict[tuple[object, int], float] = {}
    for job in ctx.blocked:
        if job.id in ctx.placed or job.id in ctx.reservations or not ctx.actionable(job):
            continue
        end = ctx.now + ctx.estimate(job)
        if end > latest or ctx.unschedulable[job.id].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            continue
        key = (job.shape, job.fewest)
        if key in failed and end >= failed[key]:
            continue
        if not ctx.within_max(job, job.fewest):
            continue
        allowed = ctx.open_to(job, backfill_end=end)
        placements, status = place_replicas(ctx, job, job.fewest, job.replicas, allowed)
        if status is None:
            ctx.record_place(job, placements)
        else:
            failed[key] = min(end, failed.get(key, end))


def _grow(ctx: CycleContext) -> None:
    growing: list[tuple[float, str, Job, int]] = []
    for r in ctx.snapshot.running:
        if (
            r.job.elastic
            and r.job.checkpointable
            and r.replicas < r.job.replicas
            and r.job.id not in ctx.evicting
        ):
            growing.append((ctx.share(r.job.queue), r.job.id, r.job, r.replicas))
    if not growing or _others_fit(ctx):
        return
    growing.sort(key=lambda g: (g[0], g[1]))
    for _, _, job, have in growing:
        if not ctx.actionable(job):
            continue
        allowed = ctx.restriction(job)
        added = []
        for _ in range(have, job.replicas):
            if not ctx.within_max(job, 1):
                break
            decision = decide_one(ctx, job.shape, allowed)
            if not decision.status.ok:
                break
            added.append(ctx.cluster.place(decision.node, job.shape, decision.gpus))
            ctx.add_usage(job, 1)
        if added:
            ctx.touched.update(p.node for p in added)
            ctx.intents.append(Resize(job.id, have + len(added), tuple(added)))


OTHERS_CHECKED = 32
"""Distinct shapes of other callers' waiting jobs tried before growth (each a scoring pass)."""


def _others_fit(ctx: CycleContext) -> bool:
    """Whether a waiting job this caller may not act on could start a replica in the room left."""
    if ctx.snapshot.actionable is None:
        return False
    shapes: set[object] = set()
    for job in ctx.snapshot.pending:
        if ctx.actionable(job) or job.id in ctx.placed or job.shape in shapes:
            continue
        if len(shapes) >= OTHERS_CHECKED:
            break
        shapes.add(job.shape)
        if decide_one(ctx, job.shape, ctx.restriction(job)).status.ok:
            return True
    return False
