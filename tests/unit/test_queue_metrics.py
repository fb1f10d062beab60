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
