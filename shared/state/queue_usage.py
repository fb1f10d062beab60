"""Each queue's guarantee, deserved share, usage and borrowing, from a folded view (for
``tessera status`` and ``tessera queue show``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.queues import ROOT, LargeJobRule, QueueTree, demand_of, open_tree, vector
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


def queue_usage(view: ClusterView) -> list[QueueUsage]:
    """Per queue (leaves and parents, parents first), in GPUs."""
    tree: QueueTree = (
        queue_tree(view.queues)
        if view.queues is not None
        else open_tree(sorted({r.spec.queue for r in view.jobs.values()}) or ["default"])
    )
    held: dict[str, object] = {}
    demand: dict[str, object] = {}
    counts: dict[str, list[int]] = {}
    for r in view.jobs.values():
        q = r.spec.queue
        c = counts.setdefault(q, [0, 0])
        if r.state == "pending":
            c[0] += 1
            demand[q] = demand.get(q, vector()) + demand_of(r.shape, r.spec.min_replicas)  # type: ignore[operator]
        elif r.status.active:
            c[1] += 1
            use = demand_of(r.shape, len(r.bindings))
            held[q] = held.get(q, vector()) + use  # type: ignore[operator]
            demand[q] = demand.get(q, vector()) + use  # type: ignore[operator]
    cluster = view.cluster
    capacity = vector(
        cluster.total_gpu_milli if cluster else 0,
        float(cluster.cpu_cap.sum()) if cluster else 0.0,
        float(cluster.mem_cap.sum()) if cluster else 0.0,
    )
    deserved = tree.deserved(capacity, demand)  # type: ignore[arg-type]
    used = tree.subtree_totals(held)  # type: ignore[arg-type]
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
