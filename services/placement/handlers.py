"""Placement decisions: pending jobs -> ``JobPlaced`` events with the node versions they read.

Pure: ``plan(view, job_ids, profile, rng)`` runs one core cycle on a copy of the folded cluster
and returns the events and expected versions of one append.  Every ``JobPlaced`` goes on the
job's stream (expected: the version read, so a job is never placed twice) and on the stream of
every node it binds (expected: the node's version read, so no GPU is ever given twice: if another
worker changed one of those nodes first, the whole append fails and the worker re-plans).
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from schemas.events import JobPlaced, TaskBinding
from shared.core.cluster import BoolArray
from shared.core.cycle import PendingJob, run_cycle
from shared.core.framework import Profile
from shared.eventstore import NewEvent
from shared.state.fold import ClusterView
from shared.state.wire import job_stream, node_stream


@dataclass(frozen=True)
class Plan:
    events: list[NewEvent]
    expected: dict[str, int]
    jobs: list[str]
    unschedulable: dict[str, str]

    def chunks(self, jobs_per_chunk: int) -> list[Plan]:
        """The plan as consecutive appends of at most ``jobs_per_chunk`` jobs each, in plan order.

        Each chunk expects the node versions the plan read, except for nodes an earlier chunk of
        the same plan changed: those expect the versions that chunk leaves behind.
        """
        out: list[Plan] = []
        heads: dict[str, int] = {}
        for start in range(0, len(self.jobs), jobs_per_chunk):
            jobs = set(self.jobs[start : start + jobs_per_chunk])
            events = [e for e in self.events if str(e.data["job_id"]) in jobs]
            expected = {e.stream: heads.get(e.stream, self.expected[e.stream]) for e in events}
            for e in events:
                heads[e.stream] = heads.get(e.stream, self.expected[e.stream]) + 1
            out.append(Plan(events, expected, self.jobs[start : start + jobs_per_chunk], {}))
        return out


def shard_mask(names: tuple[str, ...], shard: tuple[int, int] | None) -> BoolArray | None:
    """Nodes whose name hashes to shard ``k`` of ``n`` (``None``: no preference)."""
    if shard is None or shard[1] <= 1:
        return None
    k, n = shard
    return np.array([zlib.crc32(name.encode()) % n == k for name in names], dtype=np.bool_)


def plan(
    view: ClusterView,
    job_ids: Collection[str],
    profile: Profile,
    rng: np.random.Generator,
    max_jobs: int = 500,
    preferred: BoolArray | None = None,
) -> Plan:
    cluster = view.cluster
    if cluster is None:
        return Plan([], {}, [], {})
    records = [j for j in view.pending() if j.spec.id in job_ids]
    pending = [PendingJob(j.spec.id, j.shape, j.spec.replicas) for j in records]
    result = run_cycle(cluster, pending, profile, rng, max_jobs=max_jobs, preferred=preferred)
    events: list[NewEvent] = []
    expected: dict[str, int] = {}
    for record in records:
        placements = result.placed.get(record.spec.id)
        if not placements:
            continue
        nodes = sorted({cluster.names[p.node] for p in placements})
        versions = {n: view.node_version(n) for n in nodes}
        bindings = [
            TaskBinding(
                task=i,
                node=cluster.names[p.node],
                gpus=list(p.gpus),
                gpu_milli=p.task.gpu_milli,
                cpu_milli=p.task.cpu_milli,
                memory_mib=p.task.memory_mib,
            )
            for i, p in enumerate(placements)
        ]
        event = JobPlaced(
            job_id=record.spec.id, bindings=bindings, policy=profile.name, node_versions=versions
        )
        data = event.model_dump(mode="json", by_alias=True)
        events.append(NewEvent(job_stream(record.spec.id), event.type, data))
        expected[job_stream(record.spec.id)] = record.version
        for n in nodes:
            events.append(NewEvent(node_stream(n), event.type, data))
            expected[node_stream(n)] = versions[n]
    reasons = {job: status.reason for job, status in result.unschedulable.items()}
    return Plan(events, expected, list(result.placed), reasons)
