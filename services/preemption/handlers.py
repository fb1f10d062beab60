"""The preemption service's decisions: from the folded view (and the leases heard) to appends.

Pure: ``decide(view, now, heard, knobs, watch)`` looks at every job and node whose eviction is
in flight (the :class:`Watch` keeps which those are as the view moves) and returns what to
append next, each step one append guarded by the stream version it
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
4. **A shrink** (``resize_to`` on the request) is the same eviction of every task; it ends with
   ``JobResized``: the job restarts at once on its first ``resize_to`` bindings.  **A grow**
   (``JobGrowRequested``, whose added room the job already holds) too: ``EvictionStarted`` with
   ``resize_to`` above the job's size, then ``JobResized`` on its bindings plus the added ones
   (those up to the first on a node no longer schedulable); abandoned if an added node is
   cordoned or NotReady before the eviction starts.
5. **A cancel** of a job that holds resources (``CancelRequested``, from admission): the same
   eviction of every task (``by_job`` empty, a checkpointable job gets the grace), whatever else
   was asked of the job meanwhile.
6. **An eviction's end**: once every task of the attempt has stopped (``TaskStopped`` from the
   agents), or the deadline plus ``stop_report_s`` has passed and the tasks not reported are on
   NotReady nodes (nobody is left to report them) -> ``JobPreempted{checkpointed, work_lost_s}``:
   the job is pending again with attempt + 1; or, for a job being cancelled, ``JobCancelled``,
   which frees its room only now that its processes have stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.events import (
    EvictionStarted,
    JobCancelled,
    JobPreempted,
    JobResized,
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


def evict(
    record: JobRecord,
    now: float,
    grace_s: float,
    reason: str,
    by_job: str,
    signal: str,
    resize_to: int | None = None,
) -> Step:
    event = EvictionStarted(
        job_id=record.spec.id,
        attempt=record.status.attempt,
        by_job=by_job,
        reason=reason,
        grace_s=grace_s,
        deadline=now + grace_s,
        signal=signal,
        resize_to=resize_to,
    )
    what = f"shrink {record.spec.id} to {resize_to}" if resize_to is not None else f"evict {record.spec.id}"
    return _on_job(record, event, f"{what} ({reason})")


class Watch:
    """What :func:`decide` looks at, kept as the view moves instead of rescanned on every call.

    Fed by :meth:`ClusterView.drain_changed` (the preemption service's view has no other
    consumer of it), so a call costs O(jobs changed since the last one + nodes with a
    condition), not O(active jobs + nodes): ``inflight`` (jobs evicting, or PREEMPTING with a
    request to answer) and ``on_node`` (node -> active jobs bound there).  Leases expire on
    their own, with no event, so every node's lease is checked only once per ``sweep_s``: a lease
    is tens of seconds, a sweep's delay is noise beside it.
    """

    def __init__(self, sweep_s: float = 1.0) -> None:
        self.sweep_s = sweep_s
        self.seeded = False
        self.inflight: dict[str, None] = {}  # ordered: steps come out in a stable order
        self.job_nodes: dict[str, frozenset[str]] = {}
        self.on_node: dict[str, dict[str, None]] = {}
        self.swept_at = float("-inf")

    def update(self, view: ClusterView) -> None:
        changed = view.drain_changed()
        if not self.seeded:
            self.seeded = True
            changed = [r.spec.id for r in view.active()]  # a fresh watch sees every active job
        for job_id in changed:
            self._track(job_id, view.jobs.get(job_id))

    def _track(self, job_id: str, record: JobRecord | None) -> None:
        active = record is not None and record.status.active
        nodes = frozenset(record.nodes()) if record is not None and active else frozenset()
        old = self.job_nodes.get(job_id, frozenset())
        for node in old - nodes:
            holders = self.on_node.get(node)
            if holders is not None:
                holders.pop(job_id, None)
                if not holders:
                    del self.on_node[node]
        for node in nodes - old:
            self.on_node.setdefault(node, {})[job_id] = None
        if nodes:
            self.job_nodes[job_id] = nodes
        else:
            self.job_nodes.pop(job_id, None)
        wanted = (
            record is not None
            and active
            and (
                record.status.evicting
                or record.cancelling is not None
                or (record.status.phase == Phase.PREEMPTING and record.request is not None)
            )
        )
        if wanted:
            self.inflight[job_id] = None
        else:
            self.inflight.pop(job_id, None)

    def nodes_to_check(self, view: ClusterView, now: float) -> list[str]:
        """Nodes with a condition (cordoned, NotReady, ever) every call; every node per sweep."""
        if now - self.swept_at >= self.sweep_s:
            self.swept_at = now
            return sorted(view.inventories)
        return sorted(n for n in view.conditions if n in view.inventories)


def decide(
    view: ClusterView,
    now: float,
    heard: Mapping[str, float],
    knobs: Knobs,
    watch: Watch | None = None,
) -> list[Step]:
    """``heard``: node -> when its agent was last heard (the service's own clock).  ``watch``:
    the service's :class:`Watch`, kept across calls; without one, a fresh one sees everything."""
    watch = watch or Watch()
    watch.update(view)
    steps: list[Step] = []
    evicting: set[str] = set()  # jobs some step already concerns: one step per job per call
    for job_id in list(watch.inflight):
        record = view.jobs[job_id]
        evicting.add(job_id)
        if record.status.evicting:
            finished = finish(view, record, now, knobs)
            if finished is not None:
                steps.append(finished)
        elif record.cancelling is not None:
            reason = f"cancelled: {record.cancelling}" if record.cancelling else "cancelled"
            steps.append(evict(record, now, _own_grace(record, knobs), reason, "", knobs.signal))
        else:
            steps.append(answer_request(view, record, now, knobs))
    for node in watch.nodes_to_check(view, now):
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
        holders = watch.on_node.get(node, {})
        lost = not condition.ready and now - condition.since >= knobs.requeue_after_s
        draining = condition.cordoned and condition.drain
        if lost or draining:
            why = f"node {node} lost" if lost else f"drain of {node}"
            for job_id in holders:
                record = view.jobs[job_id]
                if job_id in evicting or not _holds(record, node):
                    continue
                steps.append(evict(record, now, _own_grace(record, knobs), why, "", knobs.signal))
                evicting.add(job_id)
        if draining and not condition.drained and not holders:
            steps.append(
                _on_node(view, node, NodeDrained(node=node, reason="no job left"), f"{node} drained")
            )
    return steps


def _own_grace(record: JobRecord, knobs: Knobs) -> float:
    """The grace of an eviction the service starts itself (a drain, a lost node, a cancel): a
    checkpointable job gets ``grace_s`` to save its work; any other would lose it anyway."""
    return knobs.grace_s if record.spec.checkpointable else 0.0


def _holds(record: JobRecord, node: str) -> bool:
    """Whether a task of ``record`` on ``node`` has not ended yet."""
    return any(b.node == node and b.task not in record.done for b in record.bindings)


def answer_request(view: ClusterView, record: JobRecord, now: float, knobs: Knobs) -> Step:
    assert record.request is not None
    if record.request.get("type") == "JobGrowRequested":
        return answer_grow(view, record, now, knobs)
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
    resize_to = record.request.get("resize_to")
    return evict(
        record, now, grace, reason, by, knobs.signal, int(resize_to) if resize_to is not None else None
    )


def answer_grow(view: ClusterView, record: JobRecord, now: float, knobs: Knobs) -> Step:
    """Start a grow's eviction (every task checkpoints and stops), or give the added room back
    if a node it was taken on can no longer run anything."""
    assert record.request is not None
    gone = sorted({b.node for b in record.growing if not view.condition(b.node).schedulable})
    if gone:
        event = PreemptionAbandoned(
            job_id=record.spec.id,
            by_job="",
            attempt=record.status.attempt,
            reason=f"grow abandoned: {', '.join(gone)} cordoned or NotReady",
        )
        return _on_job(record, event, f"abandon grow of {record.spec.id}")
    replicas = int(record.request["replicas"])
    reason = str(record.request.get("reason", "")) or f"grow to {replicas} replicas"
    return evict(record, now, float(record.request.get("grace_s", 0.0)), reason, "", knobs.signal, replicas)


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
    if record.cancelling is not None:
        # Whatever the eviction was for (a cancel, or a preemption or resize the cancel came
        # after), the job ends here: its tasks have stopped, so its room can be given back.
        cancelled = JobCancelled(job_id=record.spec.id, reason=record.cancelling)
        return _on_job(record, cancelled, f"{record.spec.id} cancelled (its tasks stopped)")
    resized = _resized(view, record, checkpointed, max(lost, default=0.0), reason)
    if resized is not None:
        return resized
    event = JobPreempted(
        job_id=record.spec.id,
        by_job=str(eviction.get("by_job", "")),
        attempt=status.attempt,
        checkpointed=checkpointed,
        work_lost_s=round(max(lost, default=0.0), 3),
        reason=reason,
    )
    return _on_job(record, event, f"{record.spec.id} preempted (checkpointed={checkpointed})")


def _resized(
    view: ClusterView, record: JobRecord, checkpointed: bool, lost_s: float, reason: str
) -> Step | None:
    """``JobResized`` for a resize whose kept tasks all stopped on nodes still Ready; None if it
    was no resize, or a kept task finished, failed or was lost meanwhile (the job then goes
    back to the queue whole, with ``JobPreempted``: nothing is restarted on room not held).
    A grow keeps every old task and adds its new ones up to the first on a node that can no
    longer run anything (ranks stay contiguous; the rest of the added room is given back)."""
    resize_to = (record.eviction or {}).get("resize_to")
    if resize_to is None:
        return None
    kept = sorted((b for b in record.bindings if b.task < int(resize_to)), key=lambda b: b.task)
    if len(kept) != min(int(resize_to), len(record.bindings)) or any(
        record.done.get(b.task) != "stopped" or not view.condition(b.node).ready for b in kept
    ):
        return None
    for b in sorted(record.growing, key=lambda b: b.task):
        if not view.condition(b.node).schedulable:
            break
        kept.append(b)
    event = JobResized(
        job_id=record.spec.id,
        by_job=str((record.eviction or {}).get("by_job", "")),
        attempt=record.status.attempt,
        replicas=len(kept),
        bindings=kept,
        checkpointed=checkpointed,
        work_lost_s=round(lost_s, 3),
        reason=reason,
    )
    return _on_job(record, event, f"{record.spec.id} resized to {len(kept)} (checkpointed={checkpointed})")
