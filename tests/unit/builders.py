"""Builders for small clusters and tasks used across unit tests."""

from __future__ import annotations

from shared.core.cluster import ClusterState
from shared.core.task import NodeSpec, TaskShape


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
