"""Score: GpuPacking — prefer already shared GPUs, then free GPUs on used nodes, then idle nodes.

Score bands (kube-scheduler integers): a task that fits on partly used GPUs scores in [50, 100]
(fuller GPUs better); one that needs whole GPUs of a node already in use scores in [33, 50]; one
that lands on a node with every GPU idle scores in [0, 33].  CPU-only tasks get 0 everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import MILLI, TaskShape

NAME = "gpupacking"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class GpuPackingScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        if task.num_gpu == 0:
            return Scores(np.zeros(feasible.size, dtype=np.float64))
        free = cluster.gpu_free[feasible]
        count = cluster.gpu_count[feasible]
        fully_free = (free == MILLI).sum(axis=1)
        idle_node = fully_free == count
        idle_score = np.maximum(33 - fully_free, fully_free)
        if task.is_shared:
            # The least-free GPU that still fits, as the best-fit GPU choice takes it.
            fits = free >= task.gpu_milli
            chosen = np.where(fits, free, np.iinfo(np.int64).max).min(axis=1)
            shared_score = np.maximum(100 - (chosen * 100 // MILLI) // 10, 50)
            used_score = np.where(chosen == MILLI, np.maximum(50 - 1, 33), shared_score)
        else:
            used_score = np.full(feasible.size, max(50 - task.num_gpu, 33))
        return Scores(np.where(idle_node, idle_score, used_score).astype(np.float64))


def build(args: Args | None = None) -> GpuPackingScorer:
    return GpuPackingScorer()
