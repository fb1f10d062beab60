"""A statement: tentative changes to a cycle's private cluster copy, committed or discarded whole.

Volcano's ``Statement``: a stage stages placements (and evictions) as it goes; an
all-or-nothing unit (a gang's replicas, a preemptor and its victims) is kept with
:meth:`commit` or undone with :meth:`discard`, which restores the copy exactly (``remove``
gives back what ``place`` took, digests included).
"""

from __future__ import annotations

from shared.core.cluster import ClusterState, Placement
from shared.core.task import TaskShape


class Statement:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self._placed: list[Placement] = []
        self._removed: list[Placement] = []

    def place(self, node: int, task: TaskShape, gpus: tuple[int, ...]) -> Placement:
        placement = self.cluster.place(node, task, gpus)
        self._placed.append(placement)
        return placement

    def evict(self, placement: Placement) -> None:
        """Free a running task's resources (a victim's, as if it were gone)."""
        self.cluster.remove(placement)
        self._removed.append(placement)

    @property
    def placed(self) -> list[Placement]:
        return list(self._placed)

    def commit(self) -> list[Placement]:
        """Keep every staged change; returns the placements made."""
        placed, self._placed, self._removed = self._placed, [], []
        return placed

    def discard(self) -> None:
        """Undo every staged change, newest first, so the cluster is exactly as before."""
        for p in reversed(self._placed):
            self.cluster.remove(p)
        for p in reversed(self._removed):
            self.cluster.place(p.node, p.task, p.gpus)
        self._placed, self._removed = [], []
