"""The scheduling mix for the chaos run: queues with a max, priorities, gangs, elastic jobs, and
a queue tree that changes while jobs flow; and the log checks that go with it.

The chaos run's openb pods are plain one-replica jobs of one queue: nothing in them reserves,
evicts, shrinks, grows or meets a quota.  With the mix each pod keeps its shape and run time and
gets, by a seeded draw:

* a queue: ``prod`` (tenant ``prod``, with a guarantee) or one of ``nlp`` and ``vision`` under
  ``research``, which has a ``max`` of a share of the GPUs (``RESEARCH_MAX``; the second tree
  lowers it to ``RESEARCH_MAX_LATER`` halfway through, so running work sits above it for a while
  and nothing may be placed there until it falls below);
* a priority class: in ``prod``, ``high`` (20%) or ``normal``; in ``research``, ``best-effort``
  (30%, the victims) or ``normal``;
* a shape of job: a gang of 2-3 replicas (``min-member`` all of them; 1 in 8), an elastic job
  ``1:3`` (1 in 8), else one replica; half of all jobs checkpoint, and every gang and elastic
  job does (a grow or shrink restarts every replica).

Checks on the log (:func:`mix_faults`), each 0 in a sound run:

* ``max_passed``: placements and grows that left ``research`` (or a child with a max) above the
  max of the tree in force when they were appended;
* ``placed_short``: placements with fewer replicas than the job's fewest (a gang split, an
  elastic job below its minimum);
* ``reserved_twice``: reservations made on a node another waiting job held a reservation on
  (two gangs holding halves of each other's room is Volcano #5805), except preemptors sharing
  a node: each holds only the room its own victims free there.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from schemas import JobSpec
from schemas.queues import QueueTreeSpec
from shared.core.queues import QueueTree
from shared.eventstore.port import RecordedEvent
from shared.state.fold import ClusterView
from shared.state.wire import queue_tree

RESEARCH_MAX = 0.5
"""``research``'s max, as a share of the cluster's GPUs, in the first tree."""
RESEARCH_MAX_LATER = 0.3
"""... and in the tree applied halfway through."""


PREEMPTION_ENV = {
    "TESSERA_PREEMPT_MIN_RUNTIME_S": "2",
    "TESSERA_PREEMPT_RESTART_OVERHEAD_S": "1",
    "TESSERA_PREEMPT_GRACE_S": "2",
}
"""Eviction settings for jobs that run seconds, not hours: with the defaults (10 minutes of
protected run, a minute's restart) nothing in a chaos run could ever be evicted."""


def tree(gpus: int, research_max: float) -> QueueTreeSpec:
    """``prod`` with a guarantee of a third of ``gpus``; ``research`` (``nlp``, ``vision``) under a
    max of ``research_max`` of them."""
    cap = max(1, int(gpus * research_max))
    return QueueTreeSpec.model_validate(
        {
            "queues": [
                {"name": "prod", "tenants": ["prod"], "guarantee": {"nvidia.com/gpu": gpus // 3}},
                {
                    "name": "research",
                    "tenants": ["nlp", "vision"],
                    "max": {"nvidia.com/gpu": cap},
                    "children": [
                        {
                            "name": "nlp",
                            "tenants": ["nlp"],
                            "guarantee": {"nvidia.com/gpu": min(cap, gpus // 6)},
                        },
                        {"name": "vision", "tenants": ["vision"]},
                    ],
                },
            ]
        }
    )


def _draw(job_id: str, seed: int) -> np.random.Generator:
    """A generator of the job's own (the same job draws the same, whatever the order)."""
    digest = hashlib.sha256(f"{seed}:{job_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def mixed(spec: JobSpec, seed: int) -> JobSpec:
    """``spec`` with its queue, tenant, class and shape of job drawn as the module says."""
    rng = _draw(spec.id, seed)
    queue = str(rng.choice(["prod", "nlp", "vision"]))
    if queue == "prod":
        klass = "high" if rng.random() < 0.2 else "normal"
    else:
        klass = "best-effort" if rng.random() < 0.3 else "normal"
    body = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.update({"tenant": queue, "queue": queue, "priority-class": klass})
    body.pop("priority", None)
    kind = rng.integers(0, 8)
    body["checkpointable"] = bool(kind < 2 or rng.random() < 0.5)
    if kind == 0:
        replicas = int(rng.integers(2, 4))
        body.update({"replicas": replicas, "gang": {"min-member": replicas, "timeout-s": 30}})
    elif kind == 1:
        body.update({"replicas": 3, "elastic": "1:3"})
    return JobSpec.model_validate(body)


@dataclass
class MixCounts:
    max_passed: int = 0
    placed_short: int = 0
    gangs: int = 0
    elastic: int = 0
    max_checked: int = 0  # placements and grows into a queue under a max
    reserved_twice: int = 0
    reservations: int = 0
    shared_by_preemptors: int = 0  # preemption reservations made on a node another preemptor held


def _held_by_others(view: ClusterView, job_id: str, data: Mapping[str, object]) -> tuple[bool, bool]:
    """Whether a waiting job other than ``job_id`` holds a reservation on one of the nodes of
    the reservation ``data``, where that is a fault (not two preemptors) and where it is two
    preemptors sharing a node."""
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    wanted, preempting = set(nodes), bool(data.get("preemption", False))
    fault = shared = False
    for other in view.pending_ids():
        held = view.jobs[other].reservation
        if other == job_id or held is None or not wanted & set(held["nodes"]):
            continue
        if preempting and held.get("preemption", False):
            shared = True
        else:
            fault = True
    return fault, shared


def mix_faults(events: Iterable[RecordedEvent]) -> MixCounts:
    """Replay the log in order; at each placement or grow (on the job's stream), the GPUs every
    queue with a max holds (its subtree: what its jobs' tasks hold, room a grow in flight took
    included) against the max of the tree applied by then, and the replicas placed against the
    job's fewest."""
    view, counts = ClusterView(), MixCounts()
    limits: QueueTree | None = None  # the tree in force
    for e in events:
        if e.type == "JobReserved" and e.stream.startswith("job-"):
            counts.reservations += 1
            fault, shared = _held_by_others(view, e.stream.removeprefix("job-"), e.data)
            counts.reserved_twice += fault
            counts.shared_by_preemptors += shared
        view.apply(e)
        if e.type == "QueuesApplied" and view.queues is not None:
            limits = queue_tree(view.queues)
        if not (e.stream.startswith("job-") and e.type in ("JobPlaced", "JobGrowRequested")):
            continue
        record = view.jobs[e.stream.removeprefix("job-")]
        spec = record.spec
        if e.type == "JobPlaced":
            counts.gangs += spec.gang is not None
            counts.elastic += spec.elastic is not None
            counts.placed_short += len(e.data["bindings"]) < spec.min_replicas
        if limits is None or spec.queue not in limits.specs:
            continue
        capped = limits.limiting(spec.queue)
        if not capped:
            continue
        counts.max_checked += 1
        held: collections.Counter[str] = collections.Counter()
        for job_id in view.active_ids():
            r = view.jobs[job_id]
            if r.spec.queue in limits.specs:
                milli = sum(p.task.total_gpu_milli for p in view.holding(r))
                for a in limits.ancestors(r.spec.queue):
                    held[a] += milli
        counts.max_passed += any(held[a] > limits.specs[a].max[0] for a in capped)  # milli-GPU
    return counts
