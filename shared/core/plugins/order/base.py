"""The job order extension point.

``key`` sorts a queue's pending jobs (ascending: the first is tried first); every key ends with
the job's wait start and id, so equal jobs keep a stable order.  ``rank`` says who may preempt
whom: a pending job may only preempt a running one of strictly lower rank (``preemptive``
orders only; the cycle applies the other rules).
"""

from __future__ import annotations

from typing import Protocol

from shared.core.jobs import Job, RuntimeEstimator


class JobOrder(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def preemptive(self) -> bool:
        """Whether rank alone (not priority classes) decides preemption (Tiresias' LAS)."""
        ...

    @property
    def static(self) -> bool:
        """Whether ``key`` reads the job alone, not ``now`` or the estimator: then a queue's
        order changes only as jobs come and go, and a shell's memo keeps it between cycles."""
        ...

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        """Sort key of a pending job (``estimator``: expected run times, for orders that use them)."""
        ...

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        """Preemption rank (higher may preempt lower): ``attained_gpu_s`` is what the job has
        received so far, the current run included."""
        ...
