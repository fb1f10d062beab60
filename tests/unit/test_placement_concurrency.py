"""What holds across placement workers beyond "no GPU twice" (``services/placement/handlers.py``).

Each worker plans on its own view.  Two that each saw room under a queue's max would together
pass it, on different nodes, where no node stream is shared: a placement therefore also goes on
the quota stream of every queue with a max on the job's way up the tree, expecting the version
read, and expects the queue tree's stream as read.  Two that each saw a node unreserved would
both reserve it for their own job: a reservation also goes on the ``reservations`` stream,
expecting the version read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas import JobSpec
from schemas.events import JobAdmitted, JobPlaced, NodeRegistered, QueuesApplied, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from schemas.queues import QueueTreeSpec
from services.placement.handlers import Plan, plan
from shared.core.cycle import CycleConfig
from shared.core.fragmentation import TypicalWorkload
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from shared.eventstore import NewEvent
from tests.folded_log import T0, Log

TREE = {
    "queues": [
        {"name": "org", "max": {"nvidia.com/gpu": 4}, "children": [{"name": "a"}, {"name": "b"}]},
        {"name": "open"},
    ]
}


@dataclass
class Step:
    events: list[NewEvent]
    expected: dict[str, int]


def _log(jobs: bool = True) -> Log:
    log = Log()
    for n in ("n0", "n1"):
        gpus = [GpuDevice(index=i, model="T4") for i in range(4)]
        log.add(
            f"node-{n}", NodeRegistered(inventory=NodeInventory(name=n, cpu="16", memory="64Gi", gpus=gpus))
        )
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate(TREE)))
    for job, queue in (("x", "a"), ("y", "b"), ("p", "open"), ("q", "open")) if jobs else ():
        spec = JobSpec.model_validate(
            {"id": job, "tenant": "t", "queue": queue, "resources": {"cpu": "1", "nvidia.com/gpu": 3}}
        )
        log.add(f"job-{job}", JobAdmitted(spec=spec))
    return log


def _worker_plan(log: Log, job: str, node: int, **config: object) -> Plan:
    """One worker's plan for its one job, preferring its own node (as ``--shard`` does)."""
    profile = build_profile("bestfit", TypicalWorkload.from_tasks([TaskShape(1000, 1024, 3, 1000)]))
    preferred = np.array([i == node for i in range(2)], dtype=np.bool_)
    cycle = CycleConfig(profile, **config)  # type: ignore[arg-type]
    return plan(log.view, {job}, cycle, T0 + 10, np.random.default_rng(0), preferred)


def _steps(decision: Plan) -> list[Step]:
    return [Step(events, expected) for events, expected, _ in decision.chunks(50)]


def _placed(log: Log) -> set[str]:
    return {job for job, r in log.view.jobs.items() if r.bindings}


def test_two_workers_that_each_see_room_under_a_parent_max_cannot_pass_it_together() -> None:
    log = _log()
    # Each job alone fits org's max of 4 GPUs; both need 6.  Planned on the same view, on
    # different nodes: only the quota stream of org is common to the two appends.
    first, second = _worker_plan(log, "x", 0), _worker_plan(log, "y", 1)
    assert first.jobs == ["x"] and second.jobs == ["y"]
    nodes = [{e.stream for e in d.events if e.stream.startswith("node-")} for d in (first, second)]
    assert nodes == [{"node-n0"}, {"node-n1"}]
    log.take(_steps(first))
    log.take(_steps(second))  # org's quota stream moved: the store refuses the append
    assert _placed(log) == {"x"}
    assert ("quota-org", "JobPlaced") in {(e.stream, e.type) for e in first.events}
    assert {s for s in _steps(first)[0].expected if s.startswith("quota-")} == {"quota-org"}
    # Planned again on the view that now holds x, y waits under org's max.
    assert _worker_plan(log, "y", 1).jobs == []


def test_queues_without_a_max_share_no_stream_and_place_in_parallel() -> None:
    log = _log()
    first, second = _worker_plan(log, "p", 0), _worker_plan(log, "q", 1)
    assert not any(e.stream.startswith("quota-") for d in (first, second) for e in d.events)
    log.take(_steps(first))
    log.take(_steps(second))
    assert _placed(log) == {"p", "q"}


def test_a_placement_planned_under_a_tree_since_replaced_is_refused() -> None:
    log = _log()
    stale = _worker_plan(log, "p", 0)
    # Another tree arrives before the append: the placement was planned under the old one.
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate(TREE)))
    log.take(_steps(stale))
    assert _placed(log) == set()
    log.take(_steps(_worker_plan(log, "p", 0)))
    assert _placed(log) == {"p"}


def test_two_workers_that_each_see_a_node_unreserved_cannot_both_reserve_it() -> None:
    log = _log(jobs=False)
    # Both nodes busy until one long job each ends; two 4-GPU gangs of 2, one per worker.
    for node in ("n0", "n1"):
        spec = JobSpec.model_validate(
            {
                "id": f"run-{node}",
                "tenant": "t",
                "queue": "open",
                "resources": {"cpu": "1", "nvidia.com/gpu": 4},
            }
        )
        log.add(f"job-run-{node}", JobAdmitted(spec=spec))
        binding = TaskBinding(
            task=0, node=node, gpus=[0, 1, 2, 3], gpu_milli=1000, cpu_milli=1000, memory_mib=0
        )
        placed = JobPlaced(job_id=f"run-{node}", bindings=[binding], policy="bestfit", node_versions={})
        log.add(f"job-run-{node}", placed)
        log.add(f"node-{node}", placed)
    for job in ("g1", "g2"):
        body = {
            "id": job,
            "tenant": "t",
            "queue": "open",
            "replicas": 2,
            "gang": {"min-member": 2},
            "resources": {"cpu": "1", "nvidia.com/gpu": 4},
        }
        log.add(f"job-{job}", JobAdmitted(spec=JobSpec.model_validate(body)))
    # Room for two reservations; each worker acts on its own gang only, on the same view.
    first = _worker_plan(log, "g1", 0, max_reservations=2)
    second = _worker_plan(log, "g2", 1, max_reservations=2)
    held = [
        [e.data["nodes"] for e in d.events if e.type == "JobReserved" and e.stream.startswith("job-")]
        for d in (first, second)
    ]
    assert held == [[["n0", "n1"]], [["n0", "n1"]]]  # each would hold both nodes
    log.take(_steps(first))
    log.take(_steps(second))  # the reservations stream moved: refused
    holders = {j for j, r in log.view.jobs.items() if r.reservation is not None}
    assert holders == {"g1"}
    # Planned again, the second gang sees the nodes held and reserves nothing on them.
    again = _worker_plan(log, "g2", 1, max_reservations=2)
    assert not [e for e in again.events if e.type == "JobReserved"]
