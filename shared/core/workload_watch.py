"""When a learnt typical workload no longer describes the jobs: a job that needs nodes no learnt
shape needs.

A live placement worker is not clairvoyant: it learns its typical workload from the jobs it has
seen, and rebuilding the policy drops the scorers' caches, so it relearns only when the jobs seen
have grown fourfold.  Between two rebuilds a new shape is invisible to the policy.  Usually that
costs nothing, because an unseen shape competes for the same nodes as shapes already learnt.  It
costs a great deal when the new shape is the first that only some kinds of node can hold.  In the
openb pod list, the first 8-GPU, 120-core pod arrives after 1,639 others, and only the 39 nodes
with 128 cores can hold it.  Until the policy knows that shape, nothing protects those nodes, and
small pods took all but two of them: the large pods that followed waited for good (found in
``bench_pipeline``).

The *reach* of a shape is the set of node kinds (capacity and GPU model) on which it fits when the
node is empty.  Shapes of the same reach compete for the same nodes.  A workload is stale once a
job's reach is one no learnt shape has.  There are few such reaches, at most one for each subset of
node kinds that occurs, so a worker rebuilds only a few more times (17 rebuilds instead of 5 over
the openb pod list).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from shared.core.cluster import ClusterState
from shared.core.task import TaskShape


class NodeKinds:
    """The cluster's distinct node capacities (CPU, memory, GPU count, GPU model)."""

    def __init__(self, cluster: ClusterState) -> None:
        rows = np.stack([cluster.cpu_cap, cluster.mem_cap, cluster.gpu_count, cluster.model_idx], axis=1)
        kinds, self.count = np.unique(rows, axis=0, return_counts=True)  # count: nodes of each kind
        self.cpu, self.mem, self.gpus, self.model = (kinds[:, i] for i in range(4))
        self.models = cluster.models

    def reach(self, shape: TaskShape) -> bytes:
        """Which kinds an empty node of would hold ``shape``, as a key (one byte per kind)."""
        fits = (self.cpu >= shape.cpu_milli) & (self.mem >= shape.memory_mib) & (self.gpus >= shape.num_gpu)
        if shape.num_gpu and shape.gpu_models:
            allowed = [i for i, m in enumerate(self.models) if m in shape.gpu_models]
            fits &= np.isin(self.model, allowed)
        return fits.astype(np.uint8).tobytes()


class WorkloadWatch:
    """The reaches of the shapes a workload was learnt from; says when a job brings a new one."""

    def __init__(self, cluster: ClusterState, learnt: Iterable[TaskShape]) -> None:
        self.kinds = NodeKinds(cluster)
        self._checked: set[TaskShape] = set(learnt)
        self._reaches = {self.kinds.reach(s) for s in self._checked}

    def novel(self, shapes: Iterable[TaskShape]) -> TaskShape | None:
        """The first of ``shapes`` whose reach no learnt shape has (``None``: the workload still
        describes them).  Each distinct shape is looked at once, so a steady stream of known
        shapes costs a set lookup each."""
        for shape in shapes:
            if shape in self._checked:
                continue
            self._checked.add(shape)
            if self.kinds.reach(shape) not in self._reaches:
                return shape
        return None


class Relearning:
    """When a live worker relearns its typical workload from the jobs it knows: first, when the
    nodes change, when as many jobs have come since as ``growth - 1`` times those it learnt from
    (``growth``-fold while it knows every job; a view that lets old ended jobs go learns from a
    window, and relearns as that window moves on), and (``watch_reach``) when a pending job needs
    nodes that no shape learnt needs."""

    def __init__(self, growth: int = 4, floor: int = 16, watch_reach: bool = True) -> None:
        self.growth, self.floor, self.watch_reach = growth, floor, watch_reach
        self._key: tuple[tuple[str, ...], int, int] | None = None  # (nodes, jobs come, jobs learnt from)
        self._watch: WorkloadWatch | None = None

    def due(self, names: tuple[str, ...], jobs: int, pending: Iterable[TaskShape]) -> str | None:
        """Why the workload must be relearnt now that ``jobs`` jobs have come (``None``: it need
        not).  ``pending`` is read only when the cheaper reasons do not apply."""
        if self._key is None:
            return "first jobs"
        nodes, came, learnt = self._key
        if nodes != names:
            return "the nodes changed"
        if jobs - came + learnt >= self.growth * max(self.floor, learnt):
            return f"the jobs seen grew {self.growth}-fold"
        if self._watch is not None and (novel := self._watch.novel(pending)) is not None:
            return f"a job of shape {novel} needs nodes no seen job needed"
        return None

    def learnt(self, cluster: ClusterState, jobs: int, shapes: Sequence[TaskShape]) -> None:
        """The workload was just learnt from ``shapes`` (one per job known) when ``jobs`` had come."""
        self._key = (cluster.names, jobs, len(shapes))
        self._watch = WorkloadWatch(cluster, shapes) if self.watch_reach else None
