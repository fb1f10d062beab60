"""A node's inventory as its agent registers it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.quantities import CpuMilli, MemoryMiB


class GpuDevice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int = Field(ge=0)
    uuid: str = ""
    model: str
    memory: MemoryMiB = 0
    numa_node: int = Field(0, ge=0)
    mig_profiles: list[str] = Field(default_factory=list)


class NodeInventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str = Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
    cpu: CpuMilli
    memory: MemoryMiB
    gpus: list[GpuDevice] = Field(default_factory=list)
    numa_nodes: int = Field(1, alias="numa-nodes", ge=1)
    rack: str = ""
    switch: str = ""
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model if self.gpus else ""


class NodeHeartbeat(BaseModel):
    """An agent's lease renewal for its nodes, on ``tessera.heartbeats`` every few seconds.

    Not in the event log (one per agent per few seconds would swamp it); only a lease's change
    is: ``NodeNotReady`` when one expires, ``NodeReady`` when its agent is heard from again."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str = "NodeHeartbeat"
    agent: str
    nodes: list[str]
    at: float = Field(description="epoch seconds when sent")
