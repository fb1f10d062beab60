"""Order: Tiresias' discretised two-dimensional least-attained-service (Gu et al., NSDI '19).

A job's service is the GPU-seconds it has received (GPUs x time, the "2D" of 2D-LAS).  Jobs
fall into levels by service (thresholds ``thresholds_gpu_s``); lower levels go first and are
FIFO inside.  Preemptive: a waiting job of a lower level evicts running jobs of higher levels.
A job that has waited ``promote_after_s`` is promoted back to the first level (Tiresias'
starvation guard).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from shared.core.jobs import Job, RuntimeEstimator

NAME = "las"


@dataclass(frozen=True)
class LeastAttained:
    thresholds_gpu_s: tuple[float, ...] = (3_600.0, 36_000.0)
    promote_after_s: float = 8 * 3600.0
    name: str = NAME
    preemptive: bool = True
    static: bool = False

    def level(self, attained_gpu_s: float) -> int:
        return bisect_right(self.thresholds_gpu_s, attained_gpu_s)

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        level = 0 if now - job.since >= self.promote_after_s else self.level(job.attained_gpu_s)
        return (float(level), job.since, job.id)

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        return -float(self.level(attained_gpu_s))
