"""The contracts: pydantic models of every command and event Tessera puts on the wire."""

from schemas.commands import CancelJob, Command, DrainNode, SubmitJob
from schemas.events import (
    Event,
    JobAdmitted,
    JobCancelled,
    JobFailed,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobRejected,
    JobStarted,
    NodeDrained,
    NodeRegistered,
    PreemptionRequested,
    TelemetrySampled,
)
from schemas.job import ElasticRange, GangSpec, JobSpec, Resources, Toleration
from schemas.node import GpuDevice, NodeInventory

__all__ = [
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
    "JobSpec",
    "JobStarted",
    "NodeDrained",
    "NodeInventory",
    "NodeRegistered",
    "PreemptionRequested",
    "Resources",
    "SubmitJob",
    "TelemetrySampled",
    "Toleration",
]
