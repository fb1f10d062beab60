"""A job's state machine: ``evolve(status, event_type, data) -> status``, pure and total.

The one place that says how a job moves between phases.  The event fold (``shared/state``),
the admission service's one-stream reads, the agent, the placement work items and the
simulator all call it, so they can never disagree about what a log means.

::

    JobAdmitted ─► pending ──JobPlaced──► placed ──JobStarted──► running
                      ▲                     │  └──────┬───────────────┘
                      │                     │  PreemptionRequested | JobGrowRequested | EvictionStarted
                      │                     ▼         ▼
                      └──JobPreempted── preempting   (tasks end) ─► finished | failed
                                            │ PreemptionAbandoned (before EvictionStarted)
                                            ├──► placed | running
                                            └──JobResized──► placed (new size, attempt + 1)
    any non-terminal ──JobCancelled──► cancelled

* Task events (``JobStarted``, ``JobFinished``, ``JobFailed``, ``TaskStopped``) name a task and
  the attempt they belong to; events of an earlier attempt (a preempted run's late reports) change nothing.
* A job ends when every task of its current placement has ended: ``failed`` if any failed.
* ``PreemptionRequested`` (a placement worker's) marks the job as leaving; the preemption
  service either abandons it (the job runs on) or starts the eviction (``EvictionStarted``, also
  the first step of a drain or of a lost node's requeue), after which there is no way back: the
  tasks stop (``TaskStopped``, the job stays ``preempting``) and ``JobPreempted`` of that attempt
  sends the job back to ``pending`` with ``attempt + 1``: its next placement is a new attempt,
  with task streams of its own.
* A shrink of an elastic job is the same eviction (``resize_to`` on the request and on
  ``EvictionStarted``: every task stops, as torchrun restarts all workers when membership
  changes), ended by ``JobResized`` instead: ``placed`` again at once with ``attempt + 1`` on the
  first ``resize_to`` bindings, which the job held throughout.
* A grow is the same path from ``JobGrowRequested`` (a placement worker's, which takes the added
  room at once): ``EvictionStarted`` with ``resize_to`` above the job's size stops every task,
  and ``JobResized`` restarts the job on its bindings plus the added ones (attempt + 1);
  ``PreemptionAbandoned`` before the eviction gives the added room back and the job runs on.
* A cancel of a job that holds resources comes as ``CancelRequested`` (no phase change): the
  preemption service stops its tasks with the eviction above, and ends it with ``JobCancelled``
  instead of ``JobPreempted``, so its room is given back only once its processes have stopped.
  A waiting job is cancelled at once.
* Events that do not apply to the phase (a second ``JobPlaced``, a start after the end, a
  cancel of an ended job) leave the status unchanged: the log is the truth, and a late or
  duplicate fact is harmless.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    PENDING = "pending"
    PLACED = "placed"
    RUNNING = "running"
    PREEMPTING = "preempting"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL: frozenset[str] = frozenset({Phase.FINISHED, Phase.FAILED, Phase.CANCELLED})
ACTIVE: frozenset[str] = frozenset({Phase.PLACED, Phase.RUNNING, Phase.PREEMPTING})
"""Phases that hold resources."""

TASK_ENDS: frozenset[str] = frozenset({"JobFinished", "JobFailed", "TaskStopped"})
"""Events that end a task: it finished, failed, or was stopped (an eviction or a cancel)."""
TASK_EVENTS: frozenset[str] = TASK_ENDS | {"JobStarted"}


@dataclass(frozen=True, slots=True)
class JobStatus:
    phase: Phase = Phase.PENDING
    tasks: int = 0  # tasks bound by the current placement (0 while pending)
    attempt: int = 0
    preemptions: int = 0
    started: frozenset[int] = frozenset()
    finished: frozenset[int] = frozenset()
    failed: frozenset[int] = frozenset()
    stopped: frozenset[int] = frozenset()  # tasks of an evicted attempt that have stopped
    evicting: bool = False  # EvictionStarted for this attempt: it will be preempted, no way back

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    def ended(self, task: int) -> bool:
        return task in self.finished or task in self.failed or task in self.stopped

    @property
    def all_ended(self) -> bool:
        return len(self.finished) + len(self.failed) + len(self.stopped) >= self.tasks


ADMITTED = JobStatus()


def evolve(status: JobStatus | None, event_type: str, data: Mapping[str, Any]) -> JobStatus | None:
    """The status after one event of the job's stream (``None``: not admitted yet)."""
    if event_type == "JobAdmitted":
        return status if status is not None else ADMITTED
    if status is None or status.terminal:
        return status
    if event_type in TASK_EVENTS:
        if int(data.get("attempt", 0)) != status.attempt or status.phase not in ACTIVE:
            return status  # a report of an earlier attempt, or before any placement
        task = int(data.get("task", 0))
        if event_type == "JobStarted":
            if task in status.started or status.ended(task):
                return status
            phase = Phase.RUNNING if status.phase == Phase.PLACED else status.phase
            return replace(status, phase=phase, started=status.started | {task})
        if status.ended(task):
            return status
        if event_type == "JobFinished":
            status = replace(status, finished=status.finished | {task})
        elif event_type == "JobFailed":
            status = replace(status, failed=status.failed | {task})
        else:
            status = replace(status, stopped=status.stopped | {task})
        if status.all_ended and not status.stopped:
            return replace(status, phase=Phase.FAILED if status.failed else Phase.FINISHED)
        return status  # an evicted attempt ends with JobPreempted, not here
    if event_type == "JobPlaced":
        if status.phase != Phase.PENDING:
            return status
        return replace(
            status,
            phase=Phase.PLACED,
            tasks=len(data.get("bindings", ())),
            started=frozenset(),
            finished=frozenset(),
            failed=frozenset(),
            stopped=frozenset(),
            evicting=False,
        )
    if event_type == "JobCancelled":
        return replace(status, phase=Phase.CANCELLED)
    if event_type == "PreemptionRequested":
        if status.phase in (Phase.PLACED, Phase.RUNNING):
            return replace(status, phase=Phase.PREEMPTING)
        return status
    if event_type == "JobGrowRequested":
        if status.phase not in (Phase.PLACED, Phase.RUNNING) or _other_attempt(status, data):
            return status
        return replace(status, phase=Phase.PREEMPTING)
    if event_type == "EvictionStarted":
        if status.phase not in ACTIVE or status.evicting or _other_attempt(status, data):
            return status
        return replace(status, phase=Phase.PREEMPTING, evicting=True)
    if event_type == "PreemptionAbandoned":
        if status.phase != Phase.PREEMPTING or status.evicting or _other_attempt(status, data):
            return status
        return replace(status, phase=Phase.RUNNING if status.started else Phase.PLACED)
    if event_type == "JobPreempted":
        if status.phase not in ACTIVE or _other_attempt(status, data):
            return status
        # A drain or a lost node is not the job's doing: only a preemptor's eviction counts
        # against ``max_preemptions``.
        counted = 1 if data.get("by_job") else 0
        return JobStatus(attempt=status.attempt + 1, preemptions=status.preemptions + counted)
    if event_type == "JobResized":
        if not status.evicting or _other_attempt(status, data):
            return status
        # The shrunk job's next attempt runs at once on the bindings it kept: no pending phase,
        # and a shrink is no preemption (it does not count against max_preemptions).
        return JobStatus(
            phase=Phase.PLACED,
            tasks=len(data.get("bindings", ())),
            attempt=status.attempt + 1,
            preemptions=status.preemptions,
        )
    return status  # reservations, resizes of nothing, unknown types: no phase change


def _other_attempt(status: JobStatus, data: Mapping[str, Any]) -> bool:
    return "attempt" in data and int(data["attempt"]) != status.attempt
