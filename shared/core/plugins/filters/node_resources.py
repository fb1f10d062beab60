"""Filter: enough free CPU and memory on the node."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from shared.core.cluster import BoolArray, ClusterState
from shared.core.task import TaskShape

NAME = "NodeResourcesFit"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class NodeResourcesFit:
    name: str = NAME

    def filter(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        return (cluster.cpu_free >= task.cpu_milli) & (cluster.mem_free >= task.memory_mib)

    def could_ever_fit(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        return (cluster.cpu_cap >= task.cpu_milli) & (cluster.mem_cap >= task.memory_mib)


def build(args: Args | None = None) -> NodeResourcesFit:
    return NodeResourcesFit()
