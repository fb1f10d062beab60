"""Reservations: where and when a blocked job will start, held so that no one else takes the room.

For a blocked job, each node that could ever hold a replica is replayed forward in time: its
running tasks end at their expected ends (start plus the estimator's run time), and after each
end we count how many replicas now fit.  Every such moment is a *slot*; the job's reservation is
the ``fewest`` earliest slots, on nodes no other reservation holds (these never overlap, so two
blocked gangs can never hold halves of each other's room: Volcano #5805; only preemptors may
share a node, ``preempt.stacked_room``).  Its expected
start is the last of those slots; backfill may use the held nodes only for jobs expected to end
by then.

Who reserves: a job at least ``reserve_min_gpus`` large or blocked ``reserve_after_s``, not in
back-off, while fewer than ``max_reservations`` are held.  By default (both 0, one reservation)
that is EASY backfill's rule: the first blocked job in the cycle's order.  A reservation is released
``timeout`` past its expected start if the job still has not started (estimates were wrong and
the held room idles): a gang's own ``gang.timeout-s``, else ``reserve_timeout_s``; the job then
backs off for as long.  A reservation also yields, without back-off, to a blocked job of its own
queue with a strictly higher priority (:func:`outranked`): reservations are kept from cycle to
cycle, and EASY's slot belongs to the head of the order.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from shared.core.actions.context import CycleContext, ReleaseRow, release_row
from shared.core.cluster import IntArray, Placement
from shared.core.cycle import Release
from shared.core.jobs import Job, Reservation
from shared.core.task import MILLI, TaskShape


def fit_count(cpu: int, mem: int, gpu_row: list[int], shape: TaskShape) -> int:
    """How many tasks of ``shape`` fit in a node's free resources (ignoring the GPU model).

    ``gpu_row`` is a plain list: this runs for every release of every candidate node when a
    large job reserves, and on rows of at most a few dozen GPUs Python's own ``count`` and
    ``sum`` are several times faster than numpy's per-call overhead."""
    counts = []
    if shape.cpu_milli:
        counts.append(cpu // shape.cpu_milli)
    if shape.memory_mib:
        counts.append(mem // shape.memory_mib)
    if shape.num_gpu:
        if shape.is_shared:
            milli = shape.gpu_milli
            counts.append(sum(g // milli for g in gpu_row))
        else:
            counts.append(gpu_row.count(MILLI) // shape.num_gpu)
    return min(counts) if counts else 64


def release_index(ctx: CycleContext) -> dict[int, list[ReleaseRow]]:
    """Per node, (expected end, cpu, memory, (GPU slot, milli) pairs) of what holds room there,
    soonest first: running tasks, tasks placed earlier in this cycle, victims leaving."""
    if ctx.release is not None:
        return ctx.release
    index: dict[int, list[ReleaseRow]] = defaultdict(list)

    def add(end: float, placements: Sequence[Placement]) -> None:
        for p in placements:
            index[p.node].append(release_row(end, p))

    for r in ctx.snapshot.running:
        add(ctx.leaves_at(r), r.placements)
    for job_id, placements in ctx.placed.items():
        add(ctx.placed_until(job_id), placements)
    for items in index.values():
        items.sort()  # by end; the order among equal ends changes no slot (they share one time)
    ctx.release = index
    return index


def node_slots(ctx: CycleContext, node: int, shape: TaskShape, need: int) -> list[float]:
    """Moments at which the 1st, 2nd, ... replica of ``shape`` fits on ``node`` (at most ``need``)."""
    c = ctx.cluster
    cpu, mem = int(c.cpu_free[node]), int(c.mem_free[node])
    gpu: list[int] = c.gpu_free[node].tolist()
    slots: list[float] = []
    have = fit_count(cpu, mem, gpu, shape)
    slots += [ctx.now] * min(have, need)
    for end, t_cpu, t_mem, t_gpus in release_index(ctx).get(node, []):
        if len(slots) >= need:
            break
        cpu, mem = cpu + t_cpu, mem + t_mem
        for g, milli in t_gpus:
            gpu[g] += milli
        now_fit = fit_count(cpu, mem, gpu, shape)
        if now_fit > have:
            slots += [end] * min(now_fit - have, need - len(slots))
            have = now_fit
    return slots


def earliest(ctx: CycleContext, job: Job, nodes: IntArray) -> tuple[tuple[int, ...], float] | None:
    """The nodes of the ``fewest`` earliest slots among ``nodes`` (ties: the lower node), and
    when the last one comes.

    Keeps the ``fewest`` best (time, node) pairs found so far and skips a node that cannot
    beat the worst of them: it fits nothing now and its first release is no earlier (nodes come
    in ascending order, so at an equal time the one kept wins).  On a cluster whose running
    jobs end at similar times, most nodes are then never replayed."""
    need = job.fewest
    shape = job.shape
    index = release_index(ctx)
    c = ctx.cluster
    best: list[tuple[float, int]] = []  # the best (time, node) pairs as (-time, -node): a max-heap
    for node in nodes.tolist():
        if len(best) >= need:
            worst = -best[0][0]
            releases = index.get(node)
            if (not releases or releases[0][0] >= worst) and (
                ctx.now >= worst
                or fit_count(int(c.cpu_free[node]), int(c.mem_free[node]), c.gpu_free[node].tolist(), shape)
                == 0
            ):
                continue
        for t in node_slots(ctx, node, shape, need):
            item = (-t, -node)
            if len(best) < need:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
            else:
                break  # a node's slots come in time order: the rest are no earlier
    if len(best) < need:
        return None
    chosen = sorted((-t, -n) for t, n in best)
    return tuple(sorted({n for _, n in chosen})), chosen[-1][0]


def candidates(ctx: CycleContext, job: Job, also: tuple[int, ...] = ()) -> IntArray:
    """Nodes that could hold a replica when empty and that no other job holds, with ``also``
    (schedulable nodes of a reservation about to yield) counted as open to the job."""
    mask = ctx.config.profile.could_ever_fit(ctx.cluster, job.shape)
    open_nodes = ctx.open_to(job)
    if also:
        yielded = np.zeros(ctx.cluster.size, dtype=np.bool_)
        yielded[list(also)] = True
        open_nodes = open_nodes | (yielded & ctx.cluster.schedulable)
    return np.flatnonzero(mask & open_nodes).astype(np.int64)


def refresh(ctx: CycleContext) -> None:
    """Recompute every held reservation's expected start from the snapshot (nodes and timeouts
    stay): the log records where a reservation is, each cycle works out when."""
    for job_id, r in list(ctx.reservations.items()):
        job = ctx.pending_by_id.get(job_id)
        if job is None or r.preemption:
            continue
        found = earliest(ctx, job, np.array(r.nodes, dtype=np.int64))
        start = found[1] if found is not None else r.timeout_at
        ctx.reservations[job_id] = Reservation(r.job, r.nodes, r.since, start, r.timeout_at, r.preemption)


def outranked(ctx: CycleContext, job: Job) -> str | None:
    """The held reservation that yields to ``job``, if any: one of a job of its own queue and of
    strictly lower priority (the lowest such, then the latest made), this worker's to release.

    Reservations are kept from cycle to cycle, so without this a best-effort job that reserved
    first keeps the room while a high-priority job of its queue comes and waits behind it: the
    high one may not even evict on those nodes, since they are reserved.  EASY's slot belongs to
    the head of the order, and within a queue the order is priority first.  Across queues DRF
    decides the order, so a reservation never yields to another queue's job."""
    if not ctx.config.reservations_yield:
        return None
    found: tuple[int, float, str] | None = None
    for job_id, r in ctx.reservations.items():
        holder = ctx.pending_by_id.get(job_id)
        if r.preemption or holder is None or holder.queue != job.queue or holder.priority >= job.priority:
            continue
        if not ctx.actionable(holder):
            continue
        key = (holder.priority, -r.since, job_id)
        if found is None or key < found:
            found = key
    return None if found is None else found[2]


def consider(ctx: CycleContext, job: Job) -> None:
    """Reserve for a blocked job if it qualifies and nothing is held for it yet.

    Another worker's job (not actionable here: a placement worker acts on its own jobs) that
    qualifies takes its slot without reserving: its own worker reserves it, and this worker must
    not give the slot to a later job of its own.  (Each worker used to reserve for its own first
    blocked job, so a small job of one took the slot the head of the order, a large gang of the
    other, was due.)"""
    cfg = ctx.config
    mine = ctx.actionable(job)
    if job.id in ctx.reservations:
        return
    if job.id in ctx.backoff:
        if mine:
            ctx.wake(ctx.backoff[job.id])
        return
    lower: str | None = None
    if ctx.reservations_full or ctx.held_reservations() + ctx.slots_elsewhere >= cfg.max_reservations:
        lower = outranked(ctx, job) if mine else None
        if lower is None:
            ctx.reservations_full = True  # only a placement can free one, and none comes in this stage
            return
    since = job.since
    small = job.shape.total_gpu_milli * job.replicas < 1000 * cfg.reserve_min_gpus
    if small and ctx.now < since + cfg.reserve_after_s:  # the very sum it wakes at (docs/design.md, intents)
        if mine:
            ctx.wake(since + cfg.reserve_after_s)
        return
    if not mine:
        ctx.slots_elsewhere += 1
        ctx.reservations_full = ctx.held_reservations() + ctx.slots_elsewhere >= cfg.max_reservations
        return
    yielded = ctx.reservations[lower].nodes if lower is not None else ()
    found = earliest(ctx, job, candidates(ctx, job, yielded))
    if found is None:
        return  # nowhere to reserve: a lower holder keeps its room (no release and re-reserve churn)
    if lower is not None:
        ctx.drop_reservation(lower)
        ctx.intents.append(Release(lower, f"yielded to {job.id}, of higher priority in its queue", ctx.now))
    nodes, start = found
    timeout = job.gang_timeout_s if job.fewest > 1 else cfg.reserve_timeout_s
    ctx.hold(Reservation(job.id, nodes, ctx.now, start, max(ctx.now, start) + timeout))
