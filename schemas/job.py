"""A job as users write it: a YAML job file and the Kafka ``SubmitJob`` message carry this model.

Resources per replica use Kubernetes conventions::

    resources:
      cpu: "8"                  # or 500m
      memory: 32Gi
      nvidia.com/gpu: 2         # whole GPUs
      gpu-share: 500m           # or 0.5 or "50%": a fraction of ONE GPU (shared GPU)
      gpu-memory: 10Gi          # GPU memory the share needs (HAMi-style isolation)
      gpu-compute: 50           # percent of the GPU's SMs
      nvidia.com/mig-1g.10gb: 1 # a MIG slice
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.quantities import CpuMilli, GpuShareMilli, MemoryMiB, Percent
from shared.core.priority import PRIORITY_CLASSES, unknown_class

JobId = Annotated[
    str,
    Field(pattern=r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$", description="job id: lowercase, digits, . _ -"),
]
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")]


def known_class(name: str) -> str:
    """``name`` if it is a priority class; else ``ValueError`` naming it and the classes there are
    (the one check a job spec, a queue's ``large-jobs`` and an admission's raise all make)."""
    unknown = unknown_class(name)
    if unknown is not None:
        raise ValueError(unknown)
    return name


PriorityClassName = Annotated[str, AfterValidator(known_class)]
_MIG = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")

WorkloadKind = Literal["training", "fine-tuning", "inference", "preprocessing"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(_Model):
    """What one replica needs.  Defaults: 1 CPU, 1Gi memory, no GPU."""

    cpu: CpuMilli = Field(1000, description="CPU cores per replica, e.g. '500m', '8'")
    memory: MemoryMiB = Field(1024, description="memory per replica, e.g. '512Mi', '32Gi' (kept in MiB)")
    gpu: int = Field(0, alias="nvidia.com/gpu", ge=0, le=64, description="whole GPUs per replica")
    gpu_share: GpuShareMilli | None = Field(
        None, alias="gpu-share", description="fraction of one GPU: '500m', 0.5 or '50%' (milli-GPU)"
    )
    gpu_memory: MemoryMiB | None = Field(
        None, alias="gpu-memory", description="GPU memory for a share, e.g. 10Gi"
    )
    gpu_compute: Percent | None = Field(None, alias="gpu-compute", description="percent of a GPU's compute")
    mig: dict[str, int] = Field(
        default_factory=dict, description="MIG slices by profile, e.g. {'1g.10gb': 1}"
    )

    @model_validator(mode="before")
    @classmethod
    def _collect_mig(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        mig: dict[str, Any] = dict(data.get("mig") or {})
        for key, value in data.items():
            match = _MIG.match(str(key))
            if match:
                mig[match.group(1)] = value
            elif key != "mig":
                out[key] = value
        if mig:
            out["mig"] = mig
        return out

    @field_validator("mig")
    @classmethod
    def _mig_counts(cls, value: dict[str, int]) -> dict[str, int]:
        for profile, count in value.items():
            if not re.match(r"^\d+g\.\d+gb$", profile) or count < 1:
                raise ValueError(
                    f"MIG request {profile!r}: {count} must be a profile like '1g.10gb' with count >= 1"
                )
        return value

    @model_validator(mode="after")
    def _coherent(self) -> Resources:
        if self.gpu_share is not None and self.gpu > 1:
            raise ValueError(
                "gpu-share is a fraction of one GPU; it cannot be combined with nvidia.com/gpu > 1"
            )
        if self.mig and (self.gpu or self.gpu_share is not None):
            raise ValueError("a MIG slice cannot be combined with whole or shared GPUs in one replica")
        if (self.gpu_memory is not None or self.gpu_compute is not None) and self.gpu_share is None:
            raise ValueError("gpu-memory and gpu-compute describe a GPU share; set gpu-share too")
        return self

    @property
    def num_gpu(self) -> int:
        return 1 if self.gpu_share is not None else self.gpu

    @property
    def gpu_milli(self) -> int:
        if self.gpu_share is not None:
            return self.gpu_share
        return 1000 if self.gpu else 0


class Toleration(_Model):
    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""


class GangSpec(_Model):
    """All-or-nothing: at least ``min-member`` replicas start together or none does."""

    min_member: int = Field(alias="min-member", ge=1)
    timeout_s: float = Field(300.0, alias="timeout-s", gt=0, description="give up a partial gang after this")


class ElasticRange(_Model):
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            match = re.match(r"^\s*(\d+)\s*:\s*(\d+)\s*$", data)
            if not match:
                raise ValueError(
                    f"elastic range {data!r} must look like '2:8' (min:max replicas, as torchrun)"
                )
            return {"min": int(match.group(1)), "max": int(match.group(2))}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> ElasticRange:
        if self.min > self.max:
            raise ValueError(f"elastic range min {self.min} exceeds max {self.max}")
        return self


class JobSpec(_Model):
    """One job: ``replicas`` identical tasks, each with ``resources``."""

    api_version: Literal["tessera/v1"] = Field("tessera/v1", alias="apiVersion")
    kind: Literal["Job"] = "Job"
    id: JobId
    name: str | None = None
    tenant: Name
    queue: Name = "default"
    workload: WorkloadKind = "training"
    priority: int = Field(0, ge=-1000, le=1000, description="higher runs first and may preempt lower")
    priority_class: Name | None = Field(
        None,
        alias="priority-class",
        description="critical (1000), high (100), normal (0) or best-effort (-100); sets priority",
    )
    replicas: int = Field(1, ge=1, le=4096)
    resources: Resources = Field(default_factory=Resources)
    gpu_type: list[str] = Field(
        default_factory=list, alias="gpu-type", description="accepted GPU models; empty: any"
    )
    node_selector: dict[str, str] = Field(default_factory=dict, alias="node-selector")
    tolerations: list[Toleration] = Field(default_factory=list)
    gang: GangSpec | None = None
    elastic: ElasticRange | None = None
    numa_binding: Literal["none", "preferred", "required"] = Field("none", alias="numa-binding")
    rack_affinity: Literal["none", "same-rack", "same-switch", "same-nvlink"] = Field(
        "none", alias="rack-affinity"
    )
    checkpointable: bool = False
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    duration_s: float | None = Field(
        None, alias="duration-s", gt=0, description="expected run time (simulated agents)"
    )

    @model_validator(mode="before")
    @classmethod
    def _priority_from_class(cls, data: Any) -> Any:
        """A class given alone sets ``priority`` too, so the spec's JSON (which carries both) reads
        back as the same spec (the SubmitJob on Kafka is such a round trip)."""
        if isinstance(data, dict):
            name = data.get("priority-class", data.get("priority_class"))
            if isinstance(name, str) and name in PRIORITY_CLASSES and "priority" not in data:
                data = {**data, "priority": PRIORITY_CLASSES[name]}
        return data

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_types(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v for v in value.split("|") if v]
        return value

    @model_validator(mode="after")
    def _coherent(self) -> JobSpec:
        if self.gang is not None and self.gang.min_member > self.replicas:
            raise ValueError(f"gang.min-member {self.gang.min_member} exceeds replicas {self.replicas}")
        if self.elastic is not None and not self.elastic.min <= self.replicas <= self.elastic.max:
            raise ValueError(
                f"replicas {self.replicas} outside elastic range {self.elastic.min}:{self.elastic.max}"
            )
        if self.gpu_type and self.resources.num_gpu == 0 and not self.resources.mig:
            raise ValueError("gpu-type selects GPU models, but the job requests no GPU")
        if self.priority_class is not None:
            value = PRIORITY_CLASSES[known_class(self.priority_class)]
            if "priority" in self.model_fields_set and self.priority != value:
                raise ValueError(
                    f"priority {self.priority} contradicts priority-class {self.priority_class!r} ({value}); "
                    "give one of them"
                )
        return self

    @property
    def effective_priority(self) -> int:
        """The priority the scheduler compares: the class's value, else ``priority``."""
        if self.priority_class is not None:
            return PRIORITY_CLASSES[self.priority_class]
        return self.priority

    @property
    def min_replicas(self) -> int:
        """The fewest replicas the job starts with: the elastic minimum, else the gang's
        ``min-member``, else all of them (a job's replicas start together or not at all)."""
        if self.elastic is not None:
            return self.elastic.min
        if self.gang is not None:
            return self.gang.min_member
        return self.replicas

    @property
    def max_replicas(self) -> int:
        return self.elastic.max if self.elastic is not None else self.replicas

    @property
    def accepted_models(self) -> tuple[str, ...]:
        models = set(self.gpu_type)
        if "gpu-type" in self.node_selector:
            models.add(self.node_selector["gpu-type"])
        return tuple(sorted(models))
