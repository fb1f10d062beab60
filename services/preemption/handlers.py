"""The preemption service's decisions: from the folded view (and the leases heard) to appends.

Pure: ``decide(view, now, heard, knobs)`` looks at every job and node whose eviction is in
flight and returns what to append next, each step one append guarded by the stream version it
read, so two instances (or a restarted one replaying the log) never take a step twice:

1. **A requested preemption** (``PreemptionRequested``, from a placement worker's cycle): if the
   preemptor still waits for room -> ``EvictionStarted`` (the agents signal the victim's tasks,
   SIGKILL at ``deadline``); if it no longer does (placed elsewhere, cancelled, gone) ->
   ``PreemptionAbandoned`` and the victim runs on.
2. **A drain** (``NodeCordoned`` with ``drain``): every job with a task on the node is evicted
   the same way (``by_job`` empty); once none holds anything there -> ``NodeDrained``.
3. **Leases**: a node not heard from for ``lease_s`` -> ``NodeNotReady``; heard again ->
   ``NodeReady``.  A node NotReady for ``requeue_after_s`` more has its jobs evicted (their tasks
   elsewhere checkpoint; the lost ones cannot).
4. **An eviction's end**: once every task of the attempt has stopped (``TaskStopped`` from the
   agents), or the deadline plus ``stop_report_s`` has passed and the tasks not reported are on
   NotReady nodes (nobody is left to report them) -> ``JobPreempted{checkpointed, work_lost_s}``:
   the job is pending again with attempt + 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.events import (
    EvictionStarted,
    JobPreempted,
    NodeDrained,
    NodeNotReady,
    NodeReady,
    PreemptionAbandoned,
)
from shared.core.lifecycle import Phase
from shared.eventstore import NewEvent
from shared.state.fold import ClusterView, JobRecord
from shared.state.wire import job_stream, node_stream


@dataclass(frozen=True)
class Knobs:
    lease_s: float = 30.0
    requeue_after_s: float = 30.0
    stop_report_s: float = 10.0
    grace_s: float = 30.0  # a checkpointable job's grace in a drain or a lost node's requeue
    signal: str = "SIGTERM"


@dataclass
class Step:
    """One append: its events, the versions it expects, and a line for the log."""

    events: list[NewEvent] = field(default_factory=list)
    expected: dict[str, int] = field(default_factory=dict)
    what: str = ""


def _event(stream: str, event: Any) -> NewEvent:
    data = event.model_dump(mode="json", by_alias=True)
    return NewEvent(stream, data["type"], data)


def _on_job(record: JobRecord, event: Any, what: str) -> Step:
    stream = job_stream(record.spec.id)
    return Step([_event(stream, event)], {stream: record.version}, what)


def _on_node(view: ClusterView, node: str, event: Any, what: str) -> Step:
    stream = node_stream(node)
    return Step([_event(stream, event)], {stream: view.node_version(node)}, what)


def evict(record: JobRecord, now: float, grace_s: float, reason: str, by_job: str, signal: str) -> Step:
    event = EvictionStarted(
        job_id=record.spec.id,
        attempt=record.status.attempt,
        by_job=by_job,
        reason=reason,
        grace_s=grace_s,
        deadline=now + grace_s,
        signal=signal,
    )
    return _on_job(record, event, f"evict {record.spec.id} ({reason})")


def decide(view: ClusterView, now: float, heard: Mapping[str, float], knobs: Knobs) -> list[Step]:
    """``heard``: node -> when its agent was last heard (the service's own clock)."""
    steps: list[Step] = []
    evicting: set[str] = set()  # jobs some step already concerns: one step per job per call
    by_node: dict[str, list[JobRecord]] = {}
    for record in view.active():
        for node in record.nodes():
            by_node.setdefault(node, []).append(record)
        if record.status.evicting:
            evicting.add(record.spec.id)
            finished = finish(view, record, now, knobs)
            if finished is not None:
                steps.append(finished)
        elif record.status.phase == Phase.PREEMPTING and record.request is not None:
            evicting.add(record.spec.id)
            steps.append(answer_request(view, record, now, knobs))
    for node in sorted(view.inventories):
        condition = view.condition(node)
        last = heard.get(node, 0.0)
        if condition.ready and now - last > knobs.lease_s:
            steps.append(
                _on_node(
                    view,
                    node,
                    NodeNotReady(
                        node=node, last_heartbeat=last, reason=f"no heartbeat for {knobs.lease_s:g} s"
                    ),
                    f"{node} NotReady",
                )
            )
            continue
        if not condition.ready and last > condition.since:
            steps.append(_on_node(view, node, NodeReady(node=node), f"{node} Ready"))
            continue
        jobs = [r for r in by_node.get(node, []) if r.spec.id not in evicting and _holds(r, node)]
        lost = not condition.ready and now - condition.since >= knobs.requeue_after_s
        if lost or (condition.cordoned and condition.drain):
            why = f"node {node} lost" if lost else f"drain of {node}"
            for record in jobs:
                grace = knobs.grace_s if record.spec.checkpointable else 0.0
                steps.append(evict(record, now, grace, why, "", knobs.signal))
                evicting.add(record.spec.id)
        if condition.cordoned and condition.drain and not condition.drained and not by_node.get(node):
            steps.append(
                _on_node(view, node, NodeDrained(node=node, reason="no job left"), f"{node} drained")
            )
    return steps


def _holds(record: JobRecord, node: str) -> bool:
    """Whether a task of ``record`` on ``node`` has not ended yet."""
    return any(b.node == node and b.task not in record.done for b in record.bindings)


def answer_request(view: ClusterView, record: JobRecord, now: float, knobs: Knobs) -> Step:
    assert record.request is not None
    by = str(record.request.get("by_job", ""))
    preemptor = view.jobs.get(by)
    if preemptor is None or preemptor.state != "pending":
        state = "gone" if preemptor is None else preemptor.state
        event = PreemptionAbandoned(
            job_id=record.spec.id,
            by_job=by,
            attempt=record.status.attempt,
            reason=f"preemptor {by} is {state}: it no longer needs the room",
        )
        return _on_job(record, event, f"abandon preemption of {record.spec.id} for {by}")
    grace = float(record.request.get("grace_s", 0.0))
    reason = str(record.request.get("reason", "")) or f"preempted for {by}"
    return evict(record, now, grace, reason, by, knobs.signal)


def finish(view: ClusterView, record: JobRecord, now: float, knobs: Knobs) -> Step | None:
    """``JobPreempted`` once the evicted attempt's tasks have all stopped (or cannot report)."""
    eviction = record.eviction or {}
    status = record.status
    unreported = [b for b in record.bindings if b.task not in record.done]
    if unreported:
        late = now >= float(eviction.get("deadline", now)) + knobs.stop_report_s
        if not late or any(view.condition(b.node).ready for b in unreported):
            return None  # an agent that is alive will report; wait for it
    lost_run = [max(0.0, now - record.started[b.task]) for b in unreported if b.task in record.started]
    stops = list(record.stops.values())
    ran = [s for s in stops if float(s.get("ran_s", 0.0)) > 0]
    checkpointed = bool(ran) and all(bool(s.get("checkpointed")) for s in ran) and not lost_run
    lost = [0.0 if s.get("checkpointed") else float(s.get("ran_s", 0.0)) for s in stops] + lost_run
    reason = str(eviction.get("reason", ""))
    if unreported:
        reason += f"; {len(unreported)} task(s) on NotReady nodes counted as lost"
    event = JobPreempted(
        job_id=record.spec.id,
        by_job=str(eviction.get("by_job", "")),
        attempt=status.attempt,
        checkpointed=checkpointed,
        work_lost_s=round(max(lost, default=0.0), 3),
        reason=reason,
    )
    return _on_job(record, event, f"{record.spec.id} preempted (checkpointed={checkpointed})")
