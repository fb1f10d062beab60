"""Score: Tessera's default policy (experimental parametrisation while tuning)."""

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
from shared.core.plugins.scorers.fgd import best_per_node
from shared.core.task import MILLI, TaskShape

NAME = "tessera"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    workload: TypicalWorkload
    gpu_fit_weight: float = 0.0
    node_fit_weight: float = 0.0
    band: float = 0.0
    cpu_weight: float = 0.0
    exact_gpu: bool = False
    mode: str = "fgd"


@dataclass
class TesseraScorer:
    workload: TypicalWorkload
    gpu_fit_weight: float = 0.0
    node_fit_weight: float = 0.0
    band: float = 0.0
    cpu_weight: float = 0.0
    exact_gpu: bool = False
    mode: str = "fgd"
    name: str = NAME
    _model: FragmentationModel | None = field(default=None, init=False, repr=False)
    _now: NodeFragmentation | None = field(default=None, init=False, repr=False)
    _cache: NodeValueCache | None = field(default=None, init=False, repr=False)

    def _bind(self, cluster: ClusterState) -> tuple[FragmentationModel, NodeFragmentation, NodeValueCache]:
        if self._model is None or self._now is None or self._cache is None:
            self._model = FragmentationModel(self.workload, cluster.models, self.mode)
            self._now = NodeFragmentation(self._model, cluster)
            self._cache = NodeValueCache(cluster.size)
        return self._model, self._now, self._cache

    def _ratio(self) -> float:
        w = self.workload
        g = w.num_gpu > 0
        return float((w.freq[g] * w.cpu[g]).sum() / (w.freq[g] * w.num_gpu[g] * w.gpu_milli[g]).sum())

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        model, now_frag, cache = self._bind(cluster)
        now = now_frag.current(cluster)

        def compute(nodes: IntArray) -> tuple[FloatArray, IntArray]:
            cpu, gpu, mdl, owner = after_states(cluster, nodes, task)
            after = model.frag(cpu, gpu, mdl)
            value = -(after - now[nodes][owner])
            if self.cpu_weight:
                r = self._ratio()
                s_after = np.maximum(0.0, gpu.sum(axis=1) - cpu / r)
                s_now = np.maximum(0.0, cluster.gpu_free[nodes].sum(axis=1) - cluster.cpu_free[nodes] / r)[owner]
                value = value - self.cpu_weight * (s_after - s_now)
            exact = value.copy()
            if self.band > 0:
                value = np.floor(100.0 / (1.0 + np.exp(-value / self.band)))
            node_left = gpu.sum(axis=1) / (MILLI * cluster.max_gpus)
            value = value - self.node_fit_weight * node_left
            if not task.is_shared:
                return value, np.full(nodes.size, -1, dtype=np.int64)
            _, slot = np.nonzero(cluster.gpu_free[nodes] >= task.gpu_milli)
            left = gpu[np.arange(owner.size), slot] / MILLI
            value = value - self.gpu_fit_weight * left
            best, first = best_per_node(owner, value, nodes.size)
            if self.exact_gpu:
                # GPU: best exact value among the GPUs sharing the node's best quantised score.
                cand = np.where(value == best[owner], exact - self.gpu_fit_weight * left * 0, -np.inf)
                _, first = best_per_node(owner, cand, nodes.size)
            return best, slot[first].astype(np.int64)

        values, gpu = cache.lookup(cluster, task, feasible, compute)
        return Scores(values=values, gpu=gpu if task.is_shared else None)


def build(args: Args) -> TesseraScorer:
    return TesseraScorer(
        workload=args.workload,
        gpu_fit_weight=args.gpu_fit_weight,
        node_fit_weight=args.node_fit_weight,
        band=args.band, cpu_weight=args.cpu_weight, exact_gpu=args.exact_gpu, mode=args.mode,
    )
