"""The contracts: pydantic models of every command and event Tessera puts on the wire."""

from schemas.commands import ApplyQueues, CancelJob, Command, DrainNode, SubmitJob
from schemas.events import (
    Event,
    JobAdmitted,
    JobCancelled,
    JobFailed,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobRejected,
    JobReserved,
    JobStarted,
    NodeDrained,
    NodeRegistered,
    PreemptionRequested,
    QueuesApplied,
    ReservationReleased,
    TelemetrySampled,
)
from schemas.job import ElasticRange, GangSpec, JobSpec, Resources, Toleration
from schemas.node import GpuDevice, NodeInventory
from schemas.queues import QueueConfig, QueueTreeSpec

__all__ = [
    "ApplyQueues",
    "CancelJob",
    "Command",
    "DrainNode",
    "ElasticRange",
    "Event",
    "GangSpec",
    "GpuDevice",
    "JobAdmitted",
    "JobCancelled",
    "JobFailed",
    "JobFinished",
    "JobPlaced",
    "JobPreempted",
    "JobRejected",
    "JobReserved",
    "JobSpec",
    "JobStarted",
    "NodeDrained",
    "NodeInventory",
    "NodeRegistered",
    "PreemptionRequested",
    "QueueConfig",
    "QueueTreeSpec",
    "QueuesApplied",
    "ReservationReleased",
    "Resources",
    "SubmitJob",
    "TelemetrySampled",
    "Toleration",
]
