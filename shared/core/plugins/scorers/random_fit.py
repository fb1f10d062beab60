"""Score: Random — a uniformly random feasible node, and a random fitting GPU for a shared task."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.core.cluster import ClusterState, IntArray
from shared.core.framework import Scores
from shared.core.task import TaskShape

NAME = "random"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class RandomScorer:
    name: str = NAME

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        values = np.zeros(feasible.size, dtype=np.float64)
        chosen = int(rng.integers(feasible.size))
        values[chosen] = 100.0
        if not task.is_shared:
            return Scores(values)
        gpu = np.full(feasible.size, -1, dtype=np.int64)
        slots = np.flatnonzero(cluster.gpu_free[feasible[chosen]] >= task.gpu_milli)
        gpu[chosen] = int(slots[rng.integers(slots.size)])
        return Scores(values, gpu)


def build(args: Args | None = None) -> RandomScorer:
    return RandomScorer()
