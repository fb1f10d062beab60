"""What an operator sets on top of a trace: a priority class for large jobs, and how long a job
may wait before it may preempt lower-priority work anywhere.

Traces name no priority classes (Philly) or only their own (openb's ``qos``), and their queues
no ``preempt-after``.  Live, both are what users and operators write: ``priority-class: high``
on a job's spec, ``preempt-after: 24h`` on a queue (``schemas/queues.py``).  The source
article's case is this pair: large training jobs that waited 24 h may take room from smaller,
lower-priority work.  ``tessera simulate --large-class CLASS --large-gpus N --preempt-after D``
replays a trace as if they had been written, so the effect can be measured before it is
configured (README, "Large jobs as a class of their own").

Both are the live settings themselves: the large-job rule is a queue's ``large-jobs`` (the core's
``LargeJobRule``, applied by ``QueueTree.priority_of``, which admission calls when it accepts a
job), so the simulator raises exactly the jobs a live queue would.

Pure: each function returns a new workload; the trace's own classes are only ever raised.
"""

from __future__ import annotations

from dataclasses import replace

from shared.core.queues import LargeJobRule, QueueTree
from shared.sim.workload import SimJob, Workload

LARGE_GPUS = 8.0
"""``--large-gpus`` unset: one Philly node's GPUs, the size from which a job needs a whole node."""


def with_large_jobs(workload: Workload, rule: LargeJobRule) -> Workload:
    """Every queue gets ``rule`` (``large-jobs`` live), and every job the priority it gives: at
    least the rule's class for a job that needs at least its GPUs to start (a job the trace
    already classes higher keeps its class)."""
    tree = QueueTree(replace(spec, large_jobs=rule) for spec in workload.queues.specs.values())
    jobs = tuple(_raised(tree, j) for j in workload.jobs)
    promoted = sum(a is not b for a, b in zip(jobs, workload.jobs, strict=True))
    return replace(workload, queues=tree, jobs=jobs, notes={**workload.notes, "promoted_jobs": promoted})


def _raised(tree: QueueTree, job: SimJob) -> SimJob:
    priority, rule = tree.priority_of(job.queue, job.fewest_gpus, job.priority)
    return job if rule is None else replace(job, priority=priority)


def with_preempt_after(workload: Workload, seconds: float) -> Workload:
    """Every queue lets a job that waited ``seconds`` preempt lower-priority work anywhere."""
    tree = QueueTree(replace(spec, preempt_after_s=seconds) for spec in workload.queues.specs.values())
    return replace(workload, queues=tree)
