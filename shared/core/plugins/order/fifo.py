"""Order: first submitted, first tried (the baseline every cluster starts with)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.jobs import Job, RuntimeEstimator

NAME = "fifo"


@dataclass(frozen=True)
class Fifo:
    name: str = NAME
    preemptive: bool = False
    static: bool = True

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        return (job.submitted, job.since, job.id)

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        return 0.0
