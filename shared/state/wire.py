"""Mapping between wire models (``schemas/``) and the core's dataclasses."""

from __future__ import annotations

from schemas.job import JobSpec
from schemas.node import NodeInventory
from shared.core.task import NodeSpec, TaskShape


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
