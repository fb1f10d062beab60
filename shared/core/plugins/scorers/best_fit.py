"""Score: BestFit — the node with the least CPU and GPU left over after the task, weighted 1:1
(each normalised by the largest node spec, as DotProd)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import TaskShape

NAME = "bestfit"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class BestFitScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        cpu_left = (cluster.cpu_free[feasible] - task.cpu_milli) / cluster.spec_cpu_milli * 0.5
        gpu_left = (
            (cluster.gpu_free[feasible].sum(axis=1) - task.total_gpu_milli) / cluster.spec_gpu_milli * 0.5
        )
        return Scores(np.floor((1.0 - (cpu_left + gpu_left)) * 100.0))


def build(args: Args | None = None) -> BestFitScorer:
    return BestFitScorer()
