"""Events: past-tense facts appended to the event store and relayed on ``tessera.events``.

One frozen model per event, ``extra="forbid"``, a ``schema_version``, and a ``type`` literal that
makes :data:`Event` a discriminated union (decode with ``EventAdapter.validate_json``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.job import JobId, JobSpec, PriorityClassName
from schemas.node import NodeInventory
from schemas.queues import QueueTreeSpec


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1


class CommandRejected(_Event):
    """A command other than a submission that could not be carried out (a drain of a node that
    never registered...), on stream ``rejected-<type>-<target>``."""

    type: Literal["CommandRejected"] = "CommandRejected"
    command: str
    target: str
    reason: str


class JobAdmitted(_Event):
    type: Literal["JobAdmitted"] = "JobAdmitted"
    spec: JobSpec  # as submitted (a redelivered submission compares equal to it)
    # A known class, checked where the event is read: a fold never meets one it cannot value.
    promoted_class: PriorityClassName | None = Field(
        None,
        description="the priority class the job runs at by its queue's large-jobs rule, where that "
        "is above what its spec asks for; None: its spec's own",
    )


class JobRejected(_Event):
    type: Literal["JobRejected"] = "JobRejected"
    job_id: str
    code: Literal[
        "invalid", "duplicate", "unknown-queue", "forbidden", "over-quota", "impossible", "unsupported"
    ]
    reason: str


class TaskBinding(BaseModel):
    """One replica's place: node, GPU slots and resources taken."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    task: int = Field(ge=0)
    node: str
    gpus: list[int] = Field(default_factory=list)
    gpu_milli: int = Field(0, ge=0, le=1000)
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    cpuset: list[int] = Field(default_factory=list)
    numa_node: int | None = None


class JobPlaced(_Event):
    type: Literal["JobPlaced"] = "JobPlaced"
    job_id: JobId
    attempt: int = 0
    bindings: list[TaskBinding]
    policy: str
    node_versions: dict[str, int] = Field(description="node stream versions the decision read")


class JobStarted(_Event):
    type: Literal["JobStarted"] = "JobStarted"
    job_id: JobId
    node: str
    task: int = 0
    attempt: int = 0
    pid: int | None = None
    claim: str | None = None
    """The agent process that claimed the task (a random id per process): an agent whose append
    was written but whose reply was lost (the store crashed under it) reads the task's stream to
    learn that the claim is its own."""


class JobFinished(_Event):
    type: Literal["JobFinished"] = "JobFinished"
    job_id: JobId
    node: str
    task: int = 0
    attempt: int = 0


class JobFailed(_Event):
    type: Literal["JobFailed"] = "JobFailed"
    job_id: JobId
    node: str
    task: int = 0
    attempt: int = 0
    exit_code: int | None = None
    reason: str = ""


class JobCancelled(_Event):
    type: Literal["JobCancelled"] = "JobCancelled"
    job_id: JobId
    reason: str = ""


class CancelRequested(_Event):
    """A cancel of a job that holds resources: its tasks are stopped as an eviction stops them
    (``EvictionStarted``, the agents' ``TaskStopped``), and only then does ``JobCancelled`` give
    its room back, so no new job starts beside a process that is still stopping."""

    type: Literal["CancelRequested"] = "CancelRequested"
    job_id: JobId
    reason: str = ""


class PreemptionRequested(_Event):
    """The victim ``job_id`` is to stop for ``by_job``; it may checkpoint within ``grace_s``."""

    type: Literal["PreemptionRequested"] = "PreemptionRequested"
    job_id: JobId
    by_job: JobId
    grace_s: float = Field(ge=0)
    reason: str = ""
    attempt: int = Field(0, ge=0, description="the victim's attempt being stopped")
    resize_to: int | None = Field(
        None,
        ge=1,
        description="a shrink of an elastic job instead of its preemption: it goes on with its "
        "lowest-numbered ``resize_to`` replicas (None: the whole job is evicted)",
    )


class JobGrowRequested(_Event):
    """A running elastic job is to grow to ``replicas`` tasks: ``added`` is the room for its new
    replicas (numbered after its bindings), taken now, appended on the job's stream and on every
    added node's stream with the versions the decision read (no GPU is given twice).  The
    preemption service carries it out as a resize: every task checkpoints and stops (as torchrun's
    elastic agent restarts all workers when the membership changes), then ``JobResized`` restarts
    the job on its bindings plus ``added`` (or ``PreemptionAbandoned`` gives the room back)."""

    type: Literal["JobGrowRequested"] = "JobGrowRequested"
    job_id: JobId
    attempt: int = Field(0, ge=0, description="the running attempt that grows")
    replicas: int = Field(ge=2, description="the job's size once grown")
    added: list[TaskBinding] = Field(min_length=1)
    grace_s: float = Field(ge=0, description="the tasks' time to checkpoint before they restart")
    node_versions: dict[str, int] = Field(description="node stream versions the decision read")
    reason: str = ""


class JobReserved(_Event):
    """Nodes held for a blocked job as they free up (no other job may take room there, except a
    backfill ending before ``expected_start``); released at ``timeout_at`` if it has not started."""

    type: Literal["JobReserved"] = "JobReserved"
    job_id: JobId
    nodes: list[str] = Field(min_length=1)
    expected_start: float
    timeout_at: float
    preemption: bool = Field(False, description="the room is being freed by this job's victims")


class ReservationReleased(_Event):
    type: Literal["ReservationReleased"] = "ReservationReleased"
    job_id: JobId
    reason: str
    backoff_until: float = Field(description="epoch seconds: no new reservation before then")


class QueuesApplied(_Event):
    """The queue tree from now on (on stream ``queues``): each apply replaces the whole tree."""

    type: Literal["QueuesApplied"] = "QueuesApplied"
    tree: QueueTreeSpec


class EvictionStarted(_Event):
    """The preemption service's go-ahead: the agents stop every task of ``job_id``'s ``attempt``
    now (``signal``, then SIGKILL at ``deadline``).  ``by_job`` is the preemptor ("" for a drain or
    a lost node).  Appended once per attempt (the job stream's expected version)."""

    type: Literal["EvictionStarted"] = "EvictionStarted"
    job_id: JobId
    attempt: int = Field(0, ge=0)
    by_job: str = ""
    reason: str
    grace_s: float = Field(ge=0)
    deadline: float = Field(description="epoch seconds: SIGKILL for whatever still runs")
    signal: str = Field("SIGTERM", description="sent first, so the job can checkpoint")
    resize_to: int | None = Field(
        None,
        ge=1,
        description="a shrink: every task stops (as torchrun's elastic agent restarts all workers "
        "when the membership changes), then the job restarts on its first ``resize_to`` tasks' "
        "bindings (``JobResized``), which it keeps holding meanwhile",
    )


class TaskStopped(_Event):
    """One task of an evicted attempt has stopped (on the task stream, once: expected version 1,
    or no stream for a task that never started).  ``checkpointed``: it wrote a checkpoint and exited
    within its grace."""

    type: Literal["TaskStopped"] = "TaskStopped"
    job_id: JobId
    node: str
    task: int = Field(0, ge=0)
    attempt: int = Field(0, ge=0)
    checkpointed: bool = False
    exit_code: int | None = None
    killed: bool = Field(False, description="still running at the deadline: SIGKILLed")
    ran_s: float = Field(0.0, ge=0, description="how long this attempt of the task ran")


class JobPreempted(_Event):
    """The evicted attempt is over: the job is pending again with ``attempt + 1``."""

    type: Literal["JobPreempted"] = "JobPreempted"
    job_id: JobId
    by_job: str = ""
    attempt: int = Field(0, ge=0, description="the attempt that was stopped")
    checkpointed: bool = False
    work_lost_s: float = Field(0.0, ge=0, description="run time lost: since the last checkpoint, else all")
    reason: str = ""


class JobResized(_Event):
    """A resize's eviction is over: the job's next attempt (``attempt + 1``) runs at once on
    ``bindings``: for a shrink the first ``replicas`` of the stopped attempt's (their room never
    left it; the other tasks' room is free), for a grow all of them plus the room its
    ``JobGrowRequested`` took.  Its processes see the new ``TESSERA_WORLD_SIZE`` and, if every
    stopped task checkpointed, ``TESSERA_RESUME=1``."""

    type: Literal["JobResized"] = "JobResized"
    job_id: JobId
    by_job: str = ""
    attempt: int = Field(0, ge=0, description="the attempt that was stopped")
    replicas: int = Field(ge=1)
    bindings: list[TaskBinding] = Field(min_length=1)
    checkpointed: bool = False
    work_lost_s: float = Field(0.0, ge=0, description="run time lost: since the last checkpoint, else all")
    reason: str = ""


class PreemptionAbandoned(_Event):
    """A requested preemption not carried out (the preemptor no longer needs the room): the
    victim runs on untouched.  Also a grow not carried out (an added node went away): the added
    room is free again and the job runs on at its size."""

    type: Literal["PreemptionAbandoned"] = "PreemptionAbandoned"
    job_id: JobId
    by_job: str = Field(description='the preemptor ("" for a grow, which has none)')
    attempt: int = Field(0, ge=0)
    reason: str


class NodeCordoned(_Event):
    """Nothing new goes to ``node``; with ``drain`` its jobs are evicted too (``tessera drain``)."""

    type: Literal["NodeCordoned"] = "NodeCordoned"
    node: str
    drain: bool = True
    reason: str = ""


class NodeUncordoned(_Event):
    type: Literal["NodeUncordoned"] = "NodeUncordoned"
    node: str


class NodeNotReady(_Event):
    """``node``'s lease expired: no heartbeat since ``last_heartbeat`` (epoch seconds)."""

    type: Literal["NodeNotReady"] = "NodeNotReady"
    node: str
    last_heartbeat: float
    reason: str = ""


class NodeReady(_Event):
    """``node``'s agent is heard from again after a ``NodeNotReady``."""

    type: Literal["NodeReady"] = "NodeReady"
    node: str


class NodeRegistered(_Event):
    type: Literal["NodeRegistered"] = "NodeRegistered"
    inventory: NodeInventory


class NodeDrained(_Event):
    type: Literal["NodeDrained"] = "NodeDrained"
    node: str
    reason: str = ""


class TelemetrySampled(_Event):
    type: Literal["TelemetrySampled"] = "TelemetrySampled"
    node: str
    gpu_util_pct: list[float] = Field(default_factory=list)
    gpu_memory_used_mib: list[int] = Field(default_factory=list)
    gpu_power_w: list[float] = Field(default_factory=list)
    cpu_util_pct: float = 0.0


Event = Annotated[
    CommandRejected
    | JobAdmitted
    | JobRejected
    | JobPlaced
    | JobStarted
    | JobFinished
    | JobFailed
    | JobCancelled
    | CancelRequested
    | PreemptionRequested
    | JobGrowRequested
    | JobReserved
    | ReservationReleased
    | QueuesApplied
    | JobPreempted
    | JobResized
    | EvictionStarted
    | TaskStopped
    | PreemptionAbandoned
    | NodeCordoned
    | NodeUncordoned
    | NodeNotReady
    | NodeReady
    | NodeRegistered
    | NodeDrained
    | TelemetrySampled,
    Field(discriminator="type"),
]
EventAdapter: TypeAdapter[Event] = TypeAdapter(Event)
