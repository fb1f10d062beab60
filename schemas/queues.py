"""Queues as operators write them: a YAML tree (``tessera queue apply queues.yaml``).

::

    apiVersion: tessera/v1
    kind: QueueTree
    queues:
      - name: research
        weight: 2
        guarantee: {nvidia.com/gpu: 16, cpu: "128", memory: 512Gi}
        max: {nvidia.com/gpu: 64}
        tenants: [nlp, vision]          # "*" or omitted: any tenant
        preempt-after: 24h              # a job waiting this long may preempt lower-priority work
        large-jobs: {min-gpus: 8, priority-class: high}   # jobs this large run at least at high
        children:
          - name: research-llm
            guarantee: {nvidia.com/gpu: 8}

Quotas take Kubernetes quantities: ``nvidia.com/gpu`` counts GPUs (a GPU share counts as its
fraction: ``gpu-share: 500m`` jobs of a queue with ``nvidia.com/gpu: 4`` fit eight), ``cpu``
cores, ``memory`` bytes.  A dimension left out of ``guarantee`` guarantees none of it; left out
of ``max``, it is unlimited.  Jobs are submitted to leaf queues.  ``preempt-after`` and
``large-jobs`` set on a parent act through the children that set none of their own.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.job import Name, PriorityClassName
from schemas.quantities import cpu_milli, memory_mib, parse_quantity

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration_s(value: object) -> float:
    """``90``, ``"90s"``, ``"30m"``, ``"24h"``, ``"2d"`` as seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value!r}")
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(f"{value!r} is not a duration (examples: 90, '90s', '30m', '24h', '2d')")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def duration_text(seconds: float) -> str:
    """Seconds as the shortest exact duration ``duration_s`` reads back: ``86400`` -> ``24h``."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class Quota(BaseModel):
    """A resource vector: GPUs, CPU cores, memory (Kubernetes quantities)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    gpu: float | None = Field(
        None, alias="nvidia.com/gpu", ge=0, description="GPUs (shares count as fractions)"
    )
    cpu: str | float | None = Field(None, description="CPU cores, e.g. '128' or '500m'")
    memory: str | float | None = Field(None, description="memory, e.g. 512Gi")

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: object) -> object:
        if value is not None:
            cpu_milli(value)
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: object) -> object:
        if value is not None:
            memory_mib(value)
        return value

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, value: object) -> object:
        if value is None:
            return value
        return float(parse_quantity(value))

    def as_core(self, missing: float) -> tuple[float, float, float]:
        """(milli-GPU, milli-CPU, MiB), ``missing`` where a dimension is left out."""
        return (
            missing if self.gpu is None else self.gpu * 1000.0,
            missing if self.cpu is None else float(cpu_milli(self.cpu)),
            missing if self.memory is None else float(memory_mib(self.memory)),
        )


class LargeJobs(BaseModel):
    """Jobs that need at least ``min-gpus`` GPUs to start (all replicas; a gang's ``min-member``,
    an elastic job's minimum) run at least at ``priority-class``; a job that asks for more keeps
    it.  With ``preempt-after``, a large job that waited that long may then preempt smaller,
    lower-priority work (README, "Large jobs as a class of their own")."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    min_gpus: float = Field(
        alias="min-gpus",
        gt=0,
        description="GPUs a job needs to start (its fewest replicas) from which it applies",
    )
    priority_class: PriorityClassName = Field(
        alias="priority-class", description="critical, high, normal or best-effort"
    )


class QueueConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: Name
    weight: float = Field(1.0, gt=0, description="share of idle capacity beyond guarantees among siblings")
    guarantee: Quota = Field(default_factory=Quota, description="what reclaim gives back when asked for")
    max: Quota = Field(default_factory=Quota, description="never exceeded, borrowing included")
    tenants: list[str] = Field(
        default_factory=lambda: ["*"],
        description="tenants allowed; '*': any; a parent's list bounds its children",
    )
    preempt_after: float | None = Field(
        None,
        alias="preempt-after",
        description="a job waiting this long may preempt lower-priority work anywhere (e.g. 24h); "
        "child queues without their own take it",
    )
    large_jobs: LargeJobs | None = Field(
        None,
        alias="large-jobs",
        description="jobs that need at least min-gpus GPUs to start run at least at priority-class; "
        "child queues without their own take it",
    )
    children: list[QueueConfig] = Field(default_factory=list)

    @field_validator("preempt_after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> Any:
        return None if value is None else duration_s(value)

    @model_validator(mode="after")
    def _coherent(self) -> QueueConfig:
        g, m = self.guarantee.as_core(0.0), self.max.as_core(float("inf"))
        for dim, a, b in zip(("nvidia.com/gpu", "cpu", "memory"), g, m, strict=True):
            if a > b:
                raise ValueError(f"queue {self.name!r}: guarantee {dim} exceeds its max")
        # The children's guarantees must fit the parent's max together, or some could never be
        # honoured (the max binds first).
        sums = [sum(c.guarantee.as_core(0.0)[i] for c in self.children) for i in range(3)]
        for dim, a, b in zip(("nvidia.com/gpu", "cpu", "memory"), sums, m, strict=True):
            if a > b:
                raise ValueError(f"queue {self.name!r}: its children's guarantees of {dim} exceed its max")
        return self


class QueueTreeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    api_version: Literal["tessera/v1"] = Field("tessera/v1", alias="apiVersion")
    kind: Literal["QueueTree"] = "QueueTree"
    queues: list[QueueConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> QueueTreeSpec:
        seen: set[str] = set()
        for _, q in self.walk():
            if q.name in seen:
                raise ValueError(f"queue {q.name!r} is defined twice")
            seen.add(q.name)
        return self

    def walk(self) -> list[tuple[str, QueueConfig]]:
        """(parent name, queue) for every queue, parents before children; the top's parent is 'root'."""
        out: list[tuple[str, QueueConfig]] = []
        stack = [("root", q) for q in reversed(self.queues)]
        while stack:
            parent, q = stack.pop()
            out.append((parent, q))
            stack.extend((q.name, c) for c in reversed(q.children))
        return out
