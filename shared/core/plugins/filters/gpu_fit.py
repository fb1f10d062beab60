"""Filter: enough GPU — one GPU with a large enough free share, or enough fully free GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import BoolArray, ClusterState, IntArray
from shared.core.task import MILLI, TaskShape

NAME = "GpuFit"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _fits(gpu_free: IntArray, task: TaskShape) -> BoolArray:
    if task.num_gpu == 0:
        return np.ones(gpu_free.shape[0], dtype=np.bool_)
    if task.is_shared:
        result: BoolArray = np.asarray((gpu_free >= task.gpu_milli).any(axis=1))
        return result
    whole: BoolArray = np.asarray((gpu_free == MILLI).sum(axis=1) >= task.num_gpu)
    return whole


@dataclass(frozen=True)
class GpuFit:
    name: str = NAME

    def filter(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        return _fits(cluster.gpu_free, task)

    def could_ever_fit(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        return _fits(cluster.gpu_cap, task)


def build(args: Args | None = None) -> GpuFit:
    return GpuFit()
