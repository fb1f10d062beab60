"""Score: DotProd — Tetris-style alignment of the task's demand with the node's free resources.

The node and task vectors are (CPU, total GPU share), each normalised by the largest node spec
(128 cores, 8 GPUs); the score is ``int(100 * (1 - dot / 2))``: the less the task's demand points
along what the node has left, the better (it fills the node's scarcer dimension).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import TaskShape

NAME = "dotprod"
MAX_SPEC_CPU = 128_000.0
MAX_SPEC_GPU = 8_000.0


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class DotProductScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        cpu = cluster.cpu_free[feasible] / MAX_SPEC_CPU
        gpu = cluster.gpu_free[feasible].sum(axis=1) / MAX_SPEC_GPU
        dot = cpu * (task.cpu_milli / MAX_SPEC_CPU) + gpu * (task.total_gpu_milli / MAX_SPEC_GPU)
        return Scores(np.floor(100.0 * (1.0 - dot / 2.0)))


def build(args: Args | None = None) -> DotProductScorer:
    return DotProductScorer()
