"""Each queue's GPUs and jobs as Prometheus gauges, as `tessera queue show` gives them."""

from __future__ import annotations

from prometheus_client import REGISTRY

from schemas import JobSpec
from schemas.events import JobAdmitted, JobPlaced, JobStarted, NodeRegistered, QueuesApplied, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from schemas.queues import QueueTreeSpec
from services.placement.stats import PlacementStats
from shared.state.queue_usage import queue_usage
from tests.folded_log import Log


def _gpus(queue: str, kind: str) -> float | None:
    return REGISTRY.get_sample_value("tessera_queue_gpus", {"queue": queue, "kind": kind})


def _jobs(queue: str, state: str) -> float | None:
    return REGISTRY.get_sample_value("tessera_queue_jobs", {"queue": queue, "state": state})


def test_each_queue_is_exported_and_a_queue_gone_from_the_tree_is_removed() -> None:
    log = Log()
    tree = {
        "queues": [
            {"name": "org", "guarantee": {"nvidia.com/gpu": 2}, "children": [{"name": "m1"}, {"name": "m2"}]},
            {"name": "m3", "max": {"nvidia.com/gpu": 4}},
        ]
    }
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate(tree)))
    gpus = [GpuDevice(index=i, model="T4") for i in range(4)]
    log.add("node-n", NodeRegistered(inventory=NodeInventory(name="n", cpu="16", memory="64Gi", gpus=gpus)))
    for job, queue, gpu in (("run", "m1", [0, 1, 2]), ("wait", "m2", None), ("wait-2", "m1", None)):
        spec = JobSpec.model_validate(
            {"id": job, "tenant": "t", "queue": queue, "resources": {"cpu": "1", "nvidia.com/gpu": 3}}
        )
        log.add(f"job-{job}", JobAdmitted(spec=spec))
        if gpu is not None:
            binding = TaskBinding(task=0, node="n", gpus=gpu, gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
            log.add(
                f"job-{job}", JobPlaced(job_id=job, bindings=[binding], policy="tessera", node_versions={})
            )
            log.add(f"job-{job}", JobStarted(job_id=job, node="n"))
    stats = PlacementStats()
    stats.queues(queue_usage(log.view))
    assert (_gpus("m1", "used"), _gpus("org", "used"), _gpus("org", "guarantee")) == (3.0, 3.0, 2.0)
    assert _gpus("org", "borrowed") == 1.0 and _gpus("m3", "max") == 4.0
    assert _gpus("m1", "max") == float("inf")
    assert (_jobs("m1", "running"), _jobs("m1", "pending"), _jobs("org", "pending")) == (1.0, 1.0, 2.0)
    # The tree is applied again without m3: its series go; the others stay.
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate({"queues": tree["queues"][:1]})))
    stats.queues(queue_usage(log.view))
    assert _gpus("m3", "max") is None and _jobs("m3", "pending") is None
    assert _gpus("m1", "used") == 3.0


def test_used_counts_what_tasks_hold_a_grow_in_flight_included_an_ended_replica_not() -> None:
    from schemas.events import JobFinished, JobGrowRequested

    log = Log()
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate({"queues": [{"name": "a"}]})))
    gpus = [GpuDevice(index=i, model="T4") for i in range(8)]
    log.add("node-n", NodeRegistered(inventory=NodeInventory(name="n", cpu="16", memory="64Gi", gpus=gpus)))

    def binding(task: int, gpu: int | None = None) -> TaskBinding:
        slot = task if gpu is None else gpu
        return TaskBinding(task=task, node="n", gpus=[slot], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)

    body = {"tenant": "t", "queue": "a", "resources": {"cpu": "1", "nvidia.com/gpu": 1}}
    el = JobSpec.model_validate({"id": "el", "replicas": 4, "elastic": "1:4", "checkpointable": True, **body})
    log.add("job-el", JobAdmitted(spec=el))
    log.add("job-el", JobPlaced(job_id="el", bindings=[binding(0)], policy="tessera", node_versions={}))
    log.add("job-el", JobStarted(job_id="el", node="n", task=0))
    grow = JobGrowRequested(
        job_id="el", replicas=3, added=[binding(1), binding(2)], grace_s=1, node_versions={}
    )
    log.add("job-el", grow)
    assert [q.used_gpu for q in queue_usage(log.view)] == [3.0]  # 1 running, 2 taken by the grow
    gang = JobSpec.model_validate({"id": "g", "replicas": 2, "gang": {"min-member": 2}, **body})
    log.add("job-g", JobAdmitted(spec=gang))
    log.add(
        "job-g",
        JobPlaced(job_id="g", bindings=[binding(0, 4), binding(1, 5)], policy="tessera", node_versions={}),
    )
    log.add("job-g", JobStarted(job_id="g", node="n", task=0))
    log.add("job-g", JobStarted(job_id="g", node="n", task=1))
    log.add("job-g", JobFinished(job_id="g", node="n", task=0))  # one replica done, one runs
    assert [q.used_gpu for q in queue_usage(log.view)] == [4.0]
