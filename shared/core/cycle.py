"""One scheduling cycle: place pending jobs on a snapshot, all replicas of a job or none.

1. Work on a private copy of the cluster (the snapshot), never the caller's state.
2. Take the pending jobs in the order given (the caller orders them: priority, admission, id).
3. For each job, decide every replica in turn, staging each placement on the copy (a Volcano
   "statement"); if any replica does not fit, discard the job's staged placements, so a gang never
   holds part of its resources.
   With ``preferred`` nodes (a placement worker's own share), each replica is first tried on
   those and only then on any node, so workers sharing a cluster seldom race for one node.
   A cycle only ever fills the copy, so once a shape failed with ``k`` replicas every later job of
   that shape with ``k`` or more replicas fails too: it gets the same status without a search
   (a full cluster with thousands of waiting jobs then costs one search per distinct shape).
4. Return the placements intended and the reasons for the jobs that did not fit.  Nothing is
   written: the shell turns the result into events and appends them with the node versions read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.core.cluster import BoolArray, ClusterState, Placement
from shared.core.framework import Profile, Status, decide
from shared.core.task import TaskShape


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    shape: TaskShape
    replicas: int


@dataclass
class CycleResult:
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    unschedulable: dict[str, Status] = field(default_factory=dict)
    touched: set[int] = field(default_factory=set)  # node indices whose state the cycle changes


def run_cycle(
    snapshot: ClusterState,
    pending: Sequence[PendingJob],
    profile: Profile,
    rng: np.random.Generator,
    max_jobs: int | None = None,
    preferred: BoolArray | None = None,
) -> CycleResult:
    work = snapshot.copy()
    result = CycleResult()
    failed: dict[TaskShape, tuple[int, Status]] = {}  # shape -> fewest replicas that failed, why
    for job in pending:
        if max_jobs is not None and len(result.placed) >= max_jobs:
            break
        known = failed.get(job.shape)
        if known is not None and job.replicas >= known[0]:
            result.unschedulable[job.job_id] = known[1]
            continue
        staged: list[Placement] = []
        for _ in range(job.replicas):
            decision = decide(work, job.shape, profile, rng, preferred) if preferred is not None else None
            if decision is None or not decision.status.ok:
                decision = decide(work, job.shape, profile, rng)
            if not decision.status.ok:
                for p in reversed(staged):
                    work.remove(p)
                result.unschedulable[job.job_id] = decision.status
                if known is None or job.replicas < known[0]:
                    failed[job.shape] = (job.replicas, decision.status)
                staged = []
                break
            staged.append(work.place(decision.node, job.shape, decision.gpus))
        if staged:
            result.placed[job.job_id] = staged
            result.touched.update(p.node for p in staged)
    return result
