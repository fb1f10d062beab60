"""Admission decisions: a submission becomes ``JobAdmitted`` or ``JobRejected{code, reason}``.

Pure: each function takes exactly what the decision needs and returns the events to append;
the shell reads those inputs from the event store, appends, and commits the Kafka offset.

* a field nothing honours yet (``shared/state/honoured.py``) -> ``unsupported``, naming it;
* unknown queue, or one that has queues below it -> ``unknown-queue``; a tenant the queue does
  not list -> ``forbidden``;
* a job whose fewest replicas alone exceed its queue's ``max`` (or a parent's) -> ``over-quota``:
  it could never run there;
* a replica no registered node could ever hold, even empty -> ``impossible`` (while no node has
  registered yet, nothing is called impossible: the job waits);
* an id already admitted with different content -> ``duplicate``; with the same content the
  redelivered submission changes nothing (idempotent).

An admitted job that needs at least its queue's ``large-jobs`` GPUs to start and asks for a
lower class is admitted with ``promoted_class`` set (``QueueTree.priority_of``, the function the simulator
applies too); its spec is kept as submitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import CancelRequested, JobAdmitted, JobCancelled, JobRejected
from schemas.job import JobSpec
from shared.core.cluster import ClusterState
from shared.core.queues import QueueTree, demand_of
from shared.core.registry import default_filters
from shared.core.task import TaskShape
from shared.eventstore import ANY_VERSION, NO_STREAM, NewEvent
from shared.state.fold import ACTIVE, TERMINAL, JobState
from shared.state.honoured import unhonoured
from shared.state.wire import admitted_priority, job_stream, task_shape

QueueRights = dict[str, tuple[str, ...]]  # queue -> tenants allowed ("*" = any)


@dataclass(frozen=True)
class QueuePolicy:
    """What admission knows of the queues: the tree last applied (``tessera queue apply``),
    else the configured rights (``TESSERA_QUEUES``: queues open to their tenants, no quotas)."""

    rights: QueueRights
    tree: QueueTree | None = None

    def refuse(self, spec: JobSpec) -> tuple[str, str] | None:
        """(code, reason) when the job may not enter its queue."""
        if self.tree is None:
            if spec.queue not in self.rights:
                return "unknown-queue", f"queue {spec.queue!r} does not exist; queues: {sorted(self.rights)}"
            allowed = self.rights[spec.queue]
            if "*" not in allowed and spec.tenant not in allowed:
                return "forbidden", f"tenant {spec.tenant!r} may not use queue {spec.queue!r}"
            return None
        tree = self.tree
        if spec.queue not in tree:
            return "unknown-queue", f"queue {spec.queue!r} does not exist; queues: {sorted(tree.leaves)}"
        if not tree.is_leaf(spec.queue):
            return "unknown-queue", (
                f"queue {spec.queue!r} has queues below it; submit to one of "
                f"{sorted(q for q in tree.leaves if spec.queue in tree.ancestors(q))}"
            )
        # A parent's tenant list bounds its whole subtree, as its max does.
        name = tree.refusing(spec.queue, spec.tenant)
        if name is not None:
            where = "" if name == spec.queue else f" (queue {name!r}, above it, does not allow it)"
            return "forbidden", f"tenant {spec.tenant!r} may not use queue {spec.queue!r}{where}"
        passed = tree.max_passed_alone(spec.queue, demand_of(task_shape(spec), spec.min_replicas))
        if passed is not None:
            name, over = passed
            return "over-quota", (
                f"{spec.min_replicas} replica(s) need more {', '.join(over)} than queue {name!r} "
                "may ever hold (its max): the job could never run"
            )
        return None

    def promoted_class(self, spec: JobSpec) -> str | None:
        """The class the queue's ``large-jobs`` rule (its own or an ancestor's) raises the job
        to; None where the job is smaller or asks for as much."""
        if self.tree is None:
            return None
        _, rule = admitted_priority(self.tree, spec)
        return None if rule is None else rule.priority_class


@dataclass(frozen=True)
class Outcome:
    events: list[NewEvent]
    expected: dict[str, int]
    verdict: str  # admitted | rejected | duplicate-ignored | cancelled | ignored


def rejected(job_id: str, code: str, reason: str) -> Outcome:
    event = JobRejected.model_validate({"job_id": job_id, "code": code, "reason": reason})
    stream = f"rejected-{job_id}"
    data = event.model_dump(mode="json", by_alias=True)
    return Outcome([NewEvent(stream, event.type, data)], {stream: ANY_VERSION}, "rejected")


def impossible_reason(cluster: ClusterState | None, spec: JobSpec) -> str | None:
    if cluster is None:
        return None
    shape = task_shape(spec)
    mask = None
    for f in default_filters():
        m = f.could_ever_fit(cluster, shape)
        mask = m if mask is None else mask & m
        if not mask.any():
            return (
                f"no node can ever hold one replica (cpu={shape.cpu_milli}m, memory={shape.memory_mib}Mi, "
                f"gpu={shape.num_gpu}x{shape.gpu_milli}m, models={list(shape.gpu_models) or 'any'}): "
                f"{f.name} rules out all {cluster.size} nodes"
            )
    return None


class NeverFits:
    """:func:`impossible_reason` remembered per task shape until the registered nodes change.

    The answer depends only on the shape and the nodes, and a trace has a few hundred shapes:
    checking every submission against every node cost about a tenth of admission's CPU."""

    def __init__(self) -> None:
        self._cluster: ClusterState | None = None
        self._reasons: dict[TaskShape, str | None] = {}

    def reason(self, cluster: ClusterState | None, spec: JobSpec) -> str | None:
        if cluster is not self._cluster:  # a node registered: the view built a new cluster
            self._cluster, self._reasons = cluster, {}
        shape = task_shape(spec)
        if shape not in self._reasons:
            self._reasons[shape] = impossible_reason(cluster, spec)
        return self._reasons[shape]


def admit(
    cluster: ClusterState | None,
    queues: QueuePolicy | QueueRights,
    spec: JobSpec,
    existing: JobSpec | None,
    never_fits: NeverFits | None = None,
) -> Outcome:
    """``existing``: the spec already admitted under this id, if any; ``never_fits`` a memo of
    :func:`impossible_reason` (the shell keeps one)."""
    if existing is not None:
        if existing == spec:
            return Outcome([], {}, "duplicate-ignored")
        return rejected(
            spec.id, "duplicate", f"job id {spec.id!r} was already admitted with different content"
        )
    unsupported = unhonoured(spec)
    if unsupported:
        return rejected(spec.id, "unsupported", "; ".join(unsupported))
    policy = queues if isinstance(queues, QueuePolicy) else QueuePolicy(queues)
    refusal = policy.refuse(spec)
    if refusal is not None:
        return rejected(spec.id, *refusal)
    reason = never_fits.reason(cluster, spec) if never_fits is not None else impossible_reason(cluster, spec)
    if reason is not None:
        return rejected(spec.id, "impossible", reason)
    event = JobAdmitted(spec=spec, promoted_class=policy.promoted_class(spec))
    stream = job_stream(spec.id)
    return Outcome(
        [NewEvent(stream, event.type, event.model_dump(mode="json", by_alias=True))],
        {stream: NO_STREAM},
        "admitted",
    )


def cancel(job: tuple[JobState, int] | None, job_id: str, reason: str, asked: bool = False) -> Outcome:
    """``job``: the job's state and stream version (``shared.state.fold.job_state``), if admitted;
    ``asked``: its stream holds a ``CancelRequested`` already (its tasks are being stopped)."""
    if job is None:
        return rejected(job_id, "invalid", f"cannot cancel unknown job {job_id!r}")
    state, version = job
    if state in TERMINAL:
        return Outcome([], {}, "ignored")
    if state in ACTIVE:
        if asked:
            return Outcome([], {}, "ignored")  # already being stopped, to end cancelled
        # Its processes may still run: they are stopped first (the preemption service's
        # eviction), and JobCancelled then gives the room back (``CancelRequested``).
        request = CancelRequested(job_id=job_id, reason=reason)
        stream = job_stream(job_id)
        data = request.model_dump(mode="json", by_alias=True)
        return Outcome([NewEvent(stream, request.type, data)], {stream: version}, "cancelling")
    event = JobCancelled(job_id=job_id, reason=reason)
    stream = job_stream(job_id)
    data = event.model_dump(mode="json", by_alias=True)
    return Outcome([NewEvent(stream, event.type, data)], {stream: version}, "cancelled")
