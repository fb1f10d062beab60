"""Builders for small clusters and tasks used across unit tests."""

from __future__ import annotations

from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig
from shared.core.task import NodeSpec, TaskShape
from shared.settings import Settings


def node(
    name: str = "n0", cpu: int = 32_000, mem: int = 131_072, gpus: int = 8, model: str = "A100"
) -> NodeSpec:
    return NodeSpec(name=name, cpu_milli=cpu, memory_mib=mem, gpu_count=gpus, gpu_model=model if gpus else "")


def cluster(*nodes: NodeSpec) -> ClusterState:
    return ClusterState(list(nodes) or [node()])


def task(
    cpu: int = 1_000, mem: int = 1_024, gpus: int = 0, milli: int | None = None, models: tuple[str, ...] = ()
) -> TaskShape:
    if milli is None:
        milli = 1000 if gpus else 0
    return TaskShape(cpu_milli=cpu, memory_mib=mem, num_gpu=gpus, gpu_milli=milli, gpu_models=models)


async def worker_config(settings: Settings) -> CycleConfig:
    """The cycle a placement worker runs under ``settings`` (a view of one node and one job)."""
    from schemas.events import JobAdmitted, NodeRegistered
    from services.placement.app import Worker
    from shared.eventstore.memory import InMemoryEventStore
    from shared.state.follow import catch_up
    from tests.unit.test_workload_watch import _append, _inventory, _job

    store = InMemoryEventStore()
    await _append(store, "node-g2", NodeRegistered(inventory=_inventory("g2", 96, "G2")))
    await _append(store, "job-a", JobAdmitted(spec=_job("a", 8, 1)))
    worker = Worker(settings, "w1", "tessera")
    await catch_up(worker.view, store)
    return worker.config()
