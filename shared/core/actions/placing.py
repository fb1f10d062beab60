"""Placing one job's replicas on the cycle's copy: the fewest all or nothing, then more if elastic.

Shared by allocate, backfill and the elastic grow step, so every stage places the same way:
each replica is one ``decide`` (filters, the profile's scorer) over the nodes the job may use,
the worker's preferred nodes first when it has some, and within them the nodes outside the scarce
homes of more constrained waiting jobs first (``shared/core/homes.py``).
"""

from __future__ import annotations

from shared.core.actions.context import CycleContext
from shared.core.cluster import BoolArray, Placement
from shared.core.framework import Decision, Status, decide
from shared.core.jobs import Job
from shared.core.task import TaskShape


def decide_one(ctx: CycleContext, shape: TaskShape, allowed: BoolArray | None) -> Decision:
    preferred = ctx.snapshot.preferred
    profile, rng = ctx.config.profile, ctx.rng
    spared = ctx.spared(shape)
    if preferred is not None:
        first = preferred if allowed is None else preferred & allowed
        decision = decide(ctx.cluster, shape, profile, rng, first, spared)
        if decision.status.ok:
            return decision
    return decide(ctx.cluster, shape, profile, rng, allowed, spared)


def place_replicas(
    ctx: CycleContext, job: Job, fewest: int, most: int, allowed: BoolArray | None
) -> tuple[list[Placement], Status | None]:
    """Place ``fewest`` replicas (all or none) and then up to ``most``; on failure nothing stays
    staged and the status says why the first missing replica did not fit."""
    stmt = ctx.stmt
    for _ in range(fewest):
        decision = decide_one(ctx, job.shape, allowed)
        if not decision.status.ok:
            stmt.discard()
            return [], decision.status
        stmt.place(decision.node, job.shape, decision.gpus)
    for _ in range(fewest, most):
        if not ctx.within_max(job, len(stmt.placed) + 1):
            break
        decision = decide_one(ctx, job.shape, allowed)
        if not decision.status.ok:
            break
        stmt.place(decision.node, job.shape, decision.gpus)
    return stmt.commit(), None
