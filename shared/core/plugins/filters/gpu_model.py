"""Filter: the node's GPU model is one the task accepts (``gpu-type`` selector)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import BoolArray, ClusterState
from shared.core.task import TaskShape

NAME = "GpuModel"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class GpuModel:
    name: str = NAME

    def filter(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        if task.num_gpu == 0:
            return np.ones(cluster.size, dtype=np.bool_)
        return cluster.model_mask(task.gpu_models)

    def could_ever_fit(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        return self.filter(cluster, task)


def build(args: Args | None = None) -> GpuModel:
    return GpuModel()
