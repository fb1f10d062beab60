"""Commands: imperative requests produced to Kafka (``tessera.submissions`` and friends)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.job import JobId, JobSpec
from schemas.queues import QueueTreeSpec


class _Command(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1


class SubmitJob(_Command):
    type: Literal["SubmitJob"] = "SubmitJob"
    spec: JobSpec


class CancelJob(_Command):
    type: Literal["CancelJob"] = "CancelJob"
    job_id: JobId
    reason: str = ""


class DrainNode(_Command):
    type: Literal["DrainNode"] = "DrainNode"
    node: str
    reason: str = ""


class UncordonNode(_Command):
    """Let ``node`` take work again (``tessera uncordon``)."""

    type: Literal["UncordonNode"] = "UncordonNode"
    node: str


class ApplyQueues(_Command):
    """Replace the whole queue tree (``tessera queue apply queues.yaml``)."""

    type: Literal["ApplyQueues"] = "ApplyQueues"
    tree: QueueTreeSpec


Command = Annotated[
    SubmitJob | CancelJob | DrainNode | UncordonNode | ApplyQueues, Field(discriminator="type")
]
CommandAdapter: TypeAdapter[Command] = TypeAdapter(Command)
