"""Score: FGD, fragmentation gradient descent (Weng et al., ATC '23).

Place the task where the expected fragmentation of the cluster grows least, and for a shared
task also on the GPU where it grows least.  Reproduces the paper artifact's scoring exactly,
including its quantisation: the node score is ``int(sigmoid(-delta / 1000) * 100)`` with delta the
node's fragmentation increase in milli-GPU, the GPU of a shared task is the first with the best
quantised score, and equal node scores go to the first node in the (seeded) node order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.fragmentation import (
    FloatArray,
    FragmentationModel,
    NodeFragmentation,
    TypicalWorkload,
    after_states,
)
from shared.core.framework import Scores
from shared.core.node_cache import NodeValueCache
from shared.core.task import TaskShape

NAME = "fgd"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    workload: TypicalWorkload


def quantised_score(delta: FloatArray) -> FloatArray:
    """kube-scheduler int64 score of a fragmentation increase ``delta`` (milli-GPU)."""
    result: FloatArray = np.floor(100.0 / (1.0 + np.exp(delta / 1000.0)))
    return result


def best_per_node(owner: IntArray, values: FloatArray, groups: int) -> tuple[FloatArray, IntArray]:
    """Max of ``values`` per owner group and the first position holding it (owner sorted asc)."""
    best = np.full(groups, -np.inf)
    np.maximum.at(best, owner, values)
    hit = values == best[owner]
    first = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, owner[hit], np.flatnonzero(hit))
    return best, first


@dataclass
class FGDScorer:
    workload: TypicalWorkload
    name: str = NAME
    _model: FragmentationModel | None = field(default=None, init=False, repr=False)
    _now: NodeFragmentation | None = field(default=None, init=False, repr=False)
    _cache: NodeValueCache | None = field(default=None, init=False, repr=False)

    def _bind(self, cluster: ClusterState) -> tuple[FragmentationModel, NodeFragmentation, NodeValueCache]:
        if self._model is None or self._now is None or self._cache is None:
            self._model = FragmentationModel(self.workload, cluster.models)
            self._now = NodeFragmentation(self._model, cluster)
            self._cache = NodeValueCache(cluster.size)
        return self._model, self._now, self._cache

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        model, now_frag, cache = self._bind(cluster)
        now = now_frag.current(cluster)

        def compute(nodes: IntArray) -> tuple[FloatArray, IntArray]:
            cpu, gpu, mdl, owner, slot = after_states(cluster, nodes, task)
            after = model.frag(cpu, gpu, mdl)
            per_state = quantised_score(after - now[nodes][owner])
            if not task.is_shared:
                return per_state, slot
            best, first = best_per_node(owner, per_state, nodes.size)
            return best, slot[first]

        values, gpu = cache.lookup(cluster, task, feasible, compute)
        return Scores(values=values, gpu=gpu if task.is_shared else None)


def build(args: Args) -> FGDScorer:
    return FGDScorer(workload=args.workload)
