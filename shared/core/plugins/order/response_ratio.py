"""Order: highest response ratio next (Brinch Hansen's HRRN), on top of the priority class.

A job's value is ``priority + (wait + d) / d``, where ``d`` is its expected run time (the
duration it declared, else the estimator's learnt mean): within a class, the job whose wait is
largest relative to its length goes first.  Short jobs go ahead of long ones, which is what
lowers the average completion time, but a waiting job's ratio grows without bound, so a long job
is never passed for good: it ages at one point per its own expected run time of waiting.  Across
classes the same ageing applies (a normal job passes a newly come high one after waiting about
100 times its own length), so there is no knob.  Preemption compares the priority alone, as
``priority_age`` does.  ``requeue_at`` says, as there, whether an evicted job's wait counts from
its eviction (the default) or from its submission.

It pays off only as far as ``d`` says something of one job.  On Philly with learnt per-VC
means only (fifteen draws, loads 0.8-1.0) it lowered JCT at every load (156 -> 149 h at 0.9) but
made 8-GPU jobs wait 7-13% longer, cost 0.2 points of utilisation, and raised Jain's index at
0.8 and 0.9 but not at 1.0; with durations declared within a factor of about 2.7 JCT came to 68 h
(``docs/results/timeline/history.md``, 2026-12-06).  The default order stays ``priority_age``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.jobs import Job, RuntimeEstimator
from shared.core.plugins.order.priority_age import RequeueAt, check_requeue_at, waiting_since

NAME = "response-ratio"


@dataclass(frozen=True)
class ResponseRatio:
    requeue_at: RequeueAt = "eviction"
    name: str = NAME
    preemptive: bool = False
    static: bool = False  # the ratio grows with ``now``: the order is sorted afresh each cycle

    def __post_init__(self) -> None:
        check_requeue_at(self.requeue_at)

    def key(self, job: Job, now: float, estimator: RuntimeEstimator) -> tuple[float, float, str]:
        since = waiting_since(job, self.requeue_at)
        expected = max(1.0, estimator.estimate(job))
        ratio = (max(0.0, now - since) + expected) / expected
        return (-(job.priority + ratio), since, job.id)

    def rank(self, job: Job, attained_gpu_s: float) -> float:
        return float(job.priority)
