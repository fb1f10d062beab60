"""Order: shortest (oracle) remaining run time first — a reference no real scheduler can run."""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.jobs import Job, RuntimeEstimator

NAME = "sjf"


@dataclass(frozen=True)
class ShortestFirst:
    name: str = NAME
    preemptive: bool = False
    static: bool = False

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        remaining = job.oracle_s if job.oracle_s is not None else estimator.estimate(job)
        return (remaining, job.since, job.id)

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        return 0.0
