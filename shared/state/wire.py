"""Mapping between wire models (``schemas/``) and the core's dataclasses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.job import JobSpec
from schemas.node import NodeInventory
from schemas.queues import QueueTreeSpec
from shared.core.jobs import Job
from shared.core.queues import ROOT, LargeJobRule, QueueSpec, QueueTree, vector
from shared.core.task import NodeSpec, TaskShape

if TYPE_CHECKING:
    from shared.state.fold import JobRecord


def task_shape(spec: JobSpec) -> TaskShape:
    """One replica of ``spec`` in core units."""
    r = spec.resources
    return TaskShape(
        cpu_milli=r.cpu,
        memory_mib=r.memory,
        num_gpu=r.num_gpu,
        gpu_milli=r.gpu_milli,
        gpu_models=spec.accepted_models if r.num_gpu else (),
    )


def admitted_priority(tree: QueueTree, spec: JobSpec) -> tuple[int, LargeJobRule | None]:
    """The priority ``spec`` runs at in ``tree``: its own, or the class its queue's large-jobs rule
    raises it to, judged on the GPUs it needs to start (its fewest replicas; a GPU share counts as
    its fraction)."""
    gpus = task_shape(spec).total_gpu_milli * spec.min_replicas / 1000
    return tree.priority_of(spec.queue, gpus, spec.effective_priority)


def node_spec(inventory: NodeInventory) -> NodeSpec:
    return NodeSpec(
        name=inventory.name,
        cpu_milli=inventory.cpu,
        memory_mib=inventory.memory,
        gpu_count=len(inventory.gpus),
        gpu_model=inventory.gpu_model,
        rack=inventory.rack,
        switch=inventory.switch,
        numa_nodes=inventory.numa_nodes,
    )


def job_stream(job_id: str) -> str:
    return f"job-{job_id}"


def node_stream(node: str) -> str:
    return f"node-{node}"


QUEUES_STREAM = "queues"
"""The stream of ``QueuesApplied``: every placement expects the version its tree was read at, so
one planned under a tree since replaced is planned again under the new one."""


RESERVATIONS_STREAM = "reservations"
"""A copy of every ``JobReserved``: each expects the version its worker read, so two workers that
each saw a node unreserved cannot both reserve it (two gangs holding halves of each other's room
is Volcano #5805), and a preemptor that shares a node with another planned on the other's claim.
Releases only free room and are not copied."""


def quota_stream(queue: str) -> str:
    """A copy of every placement and growth that adds to ``queue``'s usage, for a queue with a
    ``max``: placement workers plan on their own views, and two that each saw room under the max
    would together pass it; each expects the version it read, so the second append fails."""
    return f"quota-{queue}"


def core_job(record: JobRecord) -> Job:
    """A folded job as the scheduling cycle sees it (times are epoch seconds)."""
    spec = record.spec
    return Job(
        id=spec.id,
        queue=spec.queue,
        tenant=spec.tenant,
        shape=record.shape,
        replicas=spec.max_replicas,
        min_replicas=spec.min_replicas if spec.min_replicas < spec.max_replicas else 0,
        priority=record.priority,
        submitted=record.admitted_time,
        queued_since=record.queued_time,
        duration_s=spec.duration_s,
        checkpointable=spec.checkpointable,
        gang_timeout_s=spec.gang.timeout_s if spec.gang is not None else 300.0,
        attempt=record.status.attempt,
        preemptions=record.status.preemptions,
        attained_gpu_s=record.attained_gpu_s,
    )


def queue_tree(spec: QueueTreeSpec) -> QueueTree:
    """The operators' queue tree in the core's units."""
    out = []
    for parent, q in spec.walk():
        out.append(
            QueueSpec(
                name=q.name,
                parent=parent if parent != "root" else ROOT,
                weight=q.weight,
                guarantee=vector(*q.guarantee.as_core(0.0)),
                max=vector(*q.max.as_core(float("inf"))),
                tenants=tuple(q.tenants),
                preempt_after_s=q.preempt_after,
                large_jobs=None
                if q.large_jobs is None
                else LargeJobRule(q.large_jobs.min_gpus, q.large_jobs.priority_class),
            )
        )
    return QueueTree(out)
