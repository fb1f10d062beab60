"""Score: GpuClustering — keep tasks of the same GPU shape together on the same nodes.

Bands: a node holding only tasks of this task's GPU class (shared, 1-GPU, 2-GPU, ...) scores in
(75, 100]; one holding this class among others (50, 75]; a node without GPU tasks (25, 50]; a
node with only other classes [0, 25].  Within a band, fuller nodes (less GPU left) score higher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import TaskShape

NAME = "gpuclustering"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class GpuClusteringScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        if task.num_gpu == 0:
            return Scores(np.zeros(feasible.size, dtype=np.float64))
        affinity = cluster.affinity[feasible]
        classes = (affinity > 0).sum(axis=1)
        mine = affinity[:, task.affinity_class] > 0
        spec = int(cluster.spec_gpu_milli)  # the largest node: fullness stays within its band
        fullness = 25 * (spec - cluster.gpu_free[feasible].sum(axis=1)) // spec
        band = np.where(mine, np.where(classes == 1, 75, 50), np.where(classes == 0, 25, 0))
        return Scores((fullness + band).astype(np.float64))


def build(args: Args | None = None) -> GpuClusteringScorer:
    return GpuClusteringScorer()
