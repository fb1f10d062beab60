"""Stage 1, enqueue: queue usage, demand and deserved shares; each queue's jobs in order.

1. Usage of each leaf queue: what its running jobs hold (victims already being evicted still
   hold it until they are gone), and the lowest priority running in each (preemption's gate).
2. Demand: usage plus every pending job's fewest replicas; the tree's water-filling of the
   cluster's capacity gives each queue its deserved share (``QueueTree.deserved``).
3. Each leaf's pending jobs sorted by the order plugin's key (orders that use expected run
   times ask the estimator).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.core.actions.context import CycleContext
from shared.core.jobs import Job
from shared.core.queues import vector


def run(ctx: CycleContext) -> None:
    queues = ctx.queues
    held: dict[str, list[float]] = {}
    floor: dict[str, int] = {}
    for r in ctx.snapshot.running:
        q, d, p = r.job.queue, r.demand, r.job.priority
        acc = held.get(q)
        if acc is None:
            acc = held[q] = [0.0, 0.0, 0.0]
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
    sums = _totals((job, job.fewest) for job in ctx.snapshot.pending)
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
    order, est, now = ctx.config.order, ctx.snapshot.estimator, ctx.now
    known = queues.specs
    grouped: dict[str, list[Job]] = {}
    for job in ctx.snapshot.pending:
        q = (job.queue if job.queue in known else "") if ctx.config.fair_share else "*"
        group = grouped.get(q)
        if group is None:
            group = grouped[q] = []
        group.append(job)
    for q, group in grouped.items():
        group.sort(key=lambda j: order.key(j, now, est))
        ctx.ordered[q] = group


def _totals(items: Iterable[tuple[Job, int]]) -> dict[str, list[float]]:
    """Per queue name: (milli-GPU, milli-CPU, MiB) of ``replicas`` tasks of each job."""
    sums: dict[str, list[float]] = {}
    for job, k in items:
        s = job.shape
        acc = sums.get(job.queue)
        if acc is None:
            acc = sums[job.queue] = [0.0, 0.0, 0.0]
        acc[0] += s.total_gpu_milli * k
        acc[1] += s.cpu_milli * k
        acc[2] += s.memory_mib * k
    return sums
