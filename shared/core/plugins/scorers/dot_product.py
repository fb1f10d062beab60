"""Score: DotProd — Tetris-style alignment of the task's demand with the node's free resources.

The node and task vectors are (CPU, total GPU share), each normalised by the largest node spec
(``ClusterState.spec_cpu_milli`` and ``spec_gpu_milli``: 128 cores and 8 GPUs on openb, as in the
artifact; more on clusters with bigger nodes, so a 16-GPU node never scores outside 0..100); the
score is ``int(100 * (1 - dot / 2))``: the less the task's demand points along what the node
has left, the better (it fills the node's scarcer dimension).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import TaskShape

NAME = "dotprod"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class DotProductScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        max_cpu, max_gpu = cluster.spec_cpu_milli, cluster.spec_gpu_milli
        cpu = cluster.cpu_free[feasible] / max_cpu
        gpu = cluster.gpu_free[feasible].sum(axis=1) / max_gpu
        dot = cpu * (task.cpu_milli / max_cpu) + gpu * (task.total_gpu_milli / max_gpu)
        return Scores(np.floor(100.0 * (1.0 - dot / 2.0)))


def build(args: Args | None = None) -> DotProductScorer:
    return DotProductScorer()
