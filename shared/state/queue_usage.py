"""Each queue's guarantee, deserved share, usage and borrowing, from a folded view (for
``tessera status`` and ``tessera queue show``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from schemas.queues import QueueTreeSpec
from shared.core.queues import ROOT, FloatArray, LargeJobRule, QueueTree, demand_of, open_tree, vector
from shared.core.task import TaskShape
from shared.state.fold import ClusterView
from shared.state.wire import queue_tree


@dataclass(frozen=True)
class QueueUsage:
    name: str
    parent: str
    guarantee_gpu: float
    max_gpu: float
    deserved_gpu: float
    used_gpu: float
    pending: int
    running: int
    preempt_after_s: float | None = None  # as the core reads it: a parent's, where a queue sets none
    large_jobs: LargeJobRule | None = None  # likewise

    @property
    def borrowed_gpu(self) -> float:
        return max(0.0, self.used_gpu - self.guarantee_gpu)

    @property
    def gpus(self) -> tuple[float, float, float, float, float]:
        """Guarantee, max, deserved, used, borrowed."""
        return (self.guarantee_gpu, self.max_gpu, self.deserved_gpu, self.used_gpu, self.borrowed_gpu)


def queue_usage(view: ClusterView) -> list[QueueUsage]:
    """Per queue (leaves and parents, parents first), in GPUs."""
    tree: QueueTree = (
        queue_tree(view.queues)
        if view.queues is not None
        else open_tree(sorted({r.spec.queue for r in view.jobs.values()}) or ["default"])
    )
    # Replicas counted per queue and task shape over the pending and active jobs only (the
    # view indexes them), then one vector per pair: a worker exports these every few seconds,
    # and a vector per job cost tens of ms per 10,000 jobs.
    waiting: Counter[tuple[str, TaskShape]] = Counter()
    running: Counter[tuple[str, TaskShape]] = Counter()
    counts: dict[str, list[int]] = {}
    for job_id in view.pending_ids():
        r = view.jobs[job_id]
        counts.setdefault(r.spec.queue, [0, 0])[0] += 1
        waiting[r.spec.queue, r.shape] += r.spec.min_replicas
    for job_id in view.active_ids():
        r = view.jobs[job_id]
        counts.setdefault(r.spec.queue, [0, 0])[1] += 1
        running[r.spec.queue, r.shape] += len(view.holding(r))  # as the cycle counts it
    held: dict[str, FloatArray] = {}
    demand: dict[str, FloatArray] = {}
    for (q, shape), n in running.items():
        held[q] = held.get(q, vector()) + demand_of(shape, n)
    for (q, shape), n in (waiting + running).items():
        demand[q] = demand.get(q, vector()) + demand_of(shape, n)
    cluster = view.cluster
    capacity = vector(
        cluster.total_gpu_milli if cluster else 0,
        float(cluster.cpu_cap.sum()) if cluster else 0.0,
        float(cluster.mem_cap.sum()) if cluster else 0.0,
    )
    deserved = tree.deserved(capacity, demand)
    used = tree.subtree_totals(held)
    order: list[str] = []
    stack = list(reversed(tree.children.get(ROOT, [])))
    while stack:
        q = stack.pop()
        order.append(q)
        stack.extend(reversed(tree.children.get(q, [])))
    out = []
    for q in order:
        spec = tree.specs[q]
        leaves = [q] if tree.is_leaf(q) else [x for x in tree.leaves if q in tree.ancestors(x)]
        out.append(
            QueueUsage(
                name=q,
                parent=spec.parent,
                guarantee_gpu=float(spec.guarantee[0]) / 1000,
                max_gpu=float(spec.max[0]) / 1000,
                deserved_gpu=float(deserved[q][0]) / 1000,
                used_gpu=float(used[q][0]) / 1000,
                pending=sum(counts.get(x, [0, 0])[0] for x in leaves),
                running=sum(counts.get(x, [0, 0])[1] for x in leaves),
                preempt_after_s=tree.preempt_after_s[q],
                large_jobs=tree.large_jobs[q],
            )
        )
    return out


def outside_tree(view: ClusterView, tree: QueueTreeSpec | None = None) -> dict[str, tuple[int, int]]:
    """Per reason ``tree`` (by default the applied one) keeps some jobs of the view from running
    (``QueueTree.barred``: their queue is not in it, or their tenant is not allowed there), their
    pending and running job counts: the waiting ones wait (``QueueGone``, ``TenantBarred``) until
    a tree lets them in, the running ones run on.  Given the tree about to be applied, what it
    would bar."""
    spec = tree if tree is not None else view.queues
    if spec is None:
        return {}
    core = queue_tree(spec)
    out: dict[str, list[int]] = {}
    for ids, k in ((view.pending_ids(), 0), (view.active_ids(), 1)):
        for job_id in ids:
            job = view.jobs[job_id].spec
            found = core.barred(job.queue, job.tenant)
            if found is not None:
                out.setdefault(f"{found[0]}: {found[1]}", [0, 0])[k] += 1
    return {why: (p, r) for why, (p, r) in sorted(out.items())}
