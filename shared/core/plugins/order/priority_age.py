"""Order: priority class first, then age; waiting jobs age upwards so none starves.

Every ``aging_s`` of waiting counts as one priority point: jobs go in order of ``priority +
wait / aging_s``, so an old normal job eventually goes before newer ones of its class and, after
long enough, before higher classes.  Since every waiting job ages at the same rate, that order
never changes with time: it is the order of ``since - priority * aging_s`` (a job of priority p
counts as if it had been waiting p * aging_s longer), which is the key.  The ``rank`` that
preemption compares is the priority alone (aging never lets a job evict another).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.jobs import Job, RuntimeEstimator

NAME = "priority"


@dataclass(frozen=True)
class PriorityAge:
    aging_s: float = 3600.0
    name: str = NAME
    preemptive: bool = False
    static: bool = True

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        since = job.since
        return (since - job.priority * self.aging_s, since, job.id)

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        return float(job.priority)
