"""Consolidation: move small checkpointable jobs so that a blocked large job gets whole nodes.

A large gang needs whole nodes free at once.  On a busy cluster small jobs that run for weeks
end up one or two per node, and the gang's reservation then waits for jobs that the run-time
estimates said would end within hours: on Philly one 64-GPU gang waited about 1,500 h, its
held nodes idle up to 55 of 64 GPUs for hundreds of hours while nothing else was pending, kept
from starting by 1-GPU jobs that ran 1,000-2,000 h.  KAI-Scheduler's ``consolidation`` action is
the answer used in practice: move such jobs to room that is free elsewhere, and the gang fits.

The stage runs after preempt, for each job that holds a (non-preemption) reservation and is
still blocked: the first blocked job of the cycle's order, as EASY picks it.

1. **Who may move**: a running checkpointable job of no higher priority, not already leaving,
   that started at least ``min_runtime_s`` ago and was preempted fewer than
   ``max_preemptions`` times (a move counts as one; no job is bounced forever).  A move costs
   it one restart (``restart_overhead_s``), the same as a checkpointed eviction; a job that
   cannot checkpoint would lose its work, so it never moves.
2. **Which nodes**: every node the job could use is scored by the GPUs that would move per
   replica it gains once its movable jobs left (nodes that hold replicas already cost nothing);
   the cheapest are taken until the job's fewest replicas fit.  The GPUs moved in all stay
   within ``consolidate_share`` of the job's own (so each job moved is smaller than it).
3. **Checked, not hoped**: on the cycle's copy the movers leave, the job's replicas are placed
   on the chosen nodes, and every mover is placed again on the other nodes' free room.  Only if
   all of it fits does anything happen: the movers on the nodes the job uses get a ``Preempt``
   (reason ``consolidation``: they checkpoint within ``grace_s``), and the job holds those nodes
   as a preemption reservation (its room alone; it starts as soon as they are gone).  The room
   found for the movers is not held for them: they wait in their queue's order for the next
   cycle, which on a cluster with that room free places them at once.

It is not a preemption in the issue's sense: no job gives up room to one of equal priority; it
runs elsewhere, on room that was free.  Priority, reclaim and starvation are still preempt's.
"""

from __future__ import annotations

import numpy as np

from shared.core.actions import preempt, reserve
from shared.core.actions.context import CycleContext
from shared.core.actions.placing import decide_one
from shared.core.jobs import Job, Running

REASON = "consolidation"


def run(ctx: CycleContext) -> None:
    if not ctx.config.consolidate or not ctx.snapshot.running:
        return
    for job_id, r in list(ctx.reservations.items()):
        job = ctx.pending_by_id.get(job_id)
        if r.preemption or job is None or job_id in ctx.placed or not ctx.actionable(job):
            continue
        consolidate_for(ctx, job)


def _movable(ctx: CycleContext, r: Running, job: Job) -> bool:
    cfg = ctx.config
    j = r.job
    return (
        j.checkpointable
        and j.priority <= job.priority
        and j.id != job.id
        and j.id not in ctx.evicting
        and j.preemptions < cfg.max_preemptions
        and r.started + cfg.min_runtime_s <= ctx.now
        and j.gpus <= cfg.consolidate_share * job.gpus
    )


def consolidate_for(ctx: CycleContext, job: Job) -> bool:
    """Move jobs so that ``job``'s fewest replicas fit; on success append the intents."""
    c, need = ctx.cluster, job.fewest
    if not _room_in_all(ctx, job):
        return False
    idx = preempt.victim_index(ctx)  # the running tasks by node
    free: dict[int, int] = {}
    # (GPUs moved per replica gained, node, replicas gained, its movers)
    options: list[tuple[float, int, int, list[Running]]] = []
    for node in reserve.candidates(ctx, job).tolist():
        cpu, mem = int(c.cpu_free[node]), int(c.mem_free[node])
        gpu: list[int] = c.gpu_free[node].tolist()
        now_fit = reserve.fit_count(cpu, mem, gpu, job.shape)
        if now_fit:
            free[node] = now_fit
        here: dict[str, Running] = {}
        for row in idx.rows_on(node).tolist():
            r = idx.running[int(idx.job[row])]
            if r.job.id not in here and _movable(ctx, r, job):
                here[r.job.id] = r
        if not here:
            continue
        for r in here.values():
            for p in r.placements:
                if p.node == node:
                    cpu, mem = cpu + p.task.cpu_milli, mem + p.task.memory_mib
                    for g in p.gpus:
                        gpu[g] += p.task.gpu_milli
        gain = reserve.fit_count(cpu, mem, gpu, job.shape) - now_fit
        if gain > 0:
            options.append((sum(r.job.gpus for r in here.values()) / gain, node, gain, list(here.values())))
    have = sum(free.values())
    if have >= need or not options:
        return False  # it fits as it is (elsewhere in the order), or nothing can move
    options.sort(key=lambda o: (o[0], o[1]))
    chosen = set(free)
    movers: dict[str, Running] = {}
    for _, node, gain, runs in options:
        if have >= need:
            break
        have += gain
        chosen.add(node)
        movers.update((r.job.id, r) for r in runs)
    budget = ctx.config.consolidate_share * job.gpus
    if have < need or sum(r.job.gpus for r in movers.values()) > budget + 1e-9:
        return False
    used = _check(ctx, job, chosen, movers)
    if used is None:
        return False
    # Only the movers on the nodes the job uses leave; one on a chosen node it did not need stays.
    lost = ctx.config.restart_overhead_s
    leaving = {
        j: preempt.Unit(r, -1, lost * r.job.gpus, r.job.priority)
        for j, r in movers.items()
        if any(p.node in used for p in r.placements)
    }
    preempt.commit(ctx, job, leaving, tuple(sorted(used)), lambda _: REASON)
    return True


def _room_in_all(ctx: CycleContext, job: Job) -> bool:
    """Whether the whole cluster has as much free room as the job needs.  Moves only relocate
    work, so without it no plan can succeed: on Philly a 64-GPU gang was blocked in thousands
    of cycles with about 25 GPUs free, and this spares the search there."""
    c, s, n = ctx.cluster, job.shape, job.fewest
    return (
        int(c.gpu_free.sum()) >= s.total_gpu_milli * n
        and int(c.cpu_free.sum()) >= s.cpu_milli * n
        and int(c.mem_free.sum()) >= s.memory_mib * n
    )


def _check(ctx: CycleContext, job: Job, chosen: set[int], movers: dict[str, Running]) -> set[int] | None:
    """The nodes ``job``'s replicas use once ``movers`` left, if every mover also fits again on
    the other nodes (None: the plan does not hold).  The cycle's copy is left as it was."""
    stmt = ctx.stmt
    target = np.zeros(ctx.cluster.size, dtype=np.bool_)
    target[list(chosen)] = True  # candidates of the job, every one
    for r in movers.values():
        for p in r.placements:
            stmt.evict(p)
    used: set[int] = set()
    ok = True
    for _ in range(job.fewest):
        d = decide_one(ctx, job.shape, target)
        if not d.status.ok:
            ok = False
            break
        used.add(d.node)
        stmt.place(d.node, job.shape, d.gpus)
    for r in sorted(movers.values(), key=lambda r: (-r.job.gpus, r.job.id)):
        if not ok:
            break
        elsewhere = ctx.open_to(r.job) & ~target
        for _ in range(r.replicas):
            d = decide_one(ctx, r.job.shape, elsewhere)
            if not d.status.ok:
                ok = False
                break
            stmt.place(d.node, r.job.shape, d.gpus)
    stmt.discard()
    return used if ok else None
