"""Admission's batch decisions, on the in-memory event store (the shell's logic, no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from schemas import JobSpec
from schemas.commands import CancelJob, SubmitJob
from schemas.events import JobAdmitted, JobPlaced, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from services.admission.batch import Admission
from services.admission.handlers import QueueRights
from shared.eventstore import NO_STREAM, NewEvent, RecordedEvent
from shared.eventstore.memory import InMemoryEventStore
from tests.store_faults import Faulty

QUEUES: QueueRights = {"default": ("*",), "secret": ("ops",)}


def spec(job: str, cpu: str = "2", gpus: int = 1, **extra: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"id": job, "tenant": "t", "resources": {"cpu": cpu, "nvidia.com/gpu": gpus}, **extra}
    )


async def with_nodes(store: InMemoryEventStore) -> None:
    inventory = NodeInventory(name="a", cpu="8", memory="16Gi", gpus=[GpuDevice(index=0, model="T4")])
    event = NodeRegistered(inventory=inventory)
    await store.append(
        [NewEvent("node-a", event.type, event.model_dump(mode="json", by_alias=True))], {"node-a": 0}
    )


async def kinds(store: InMemoryEventStore) -> list[tuple[str, str]]:
    return [(e.stream, e.type) for e in await store.read_all(0, 1000) if e.type != "NodeRegistered"]


async def test_a_batch_admits_rejects_and_ignores_in_one_pass() -> None:
    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    verdicts = await admission.decide(
        [
            SubmitJob(spec=spec("ok")),
            SubmitJob(spec=spec("ok")),  # a redelivery inside the same batch
            SubmitJob(spec=spec("ok", cpu="3")),  # same id, other content
            SubmitJob(spec=spec("lost", queue="nowhere")),
            SubmitJob(spec=spec("sneaky", queue="secret")),
            SubmitJob(spec=spec("huge", gpus=2)),  # node a has one GPU
        ]
    )
    assert verdicts == ["admitted", "duplicate-ignored", "rejected", "rejected", "rejected", "rejected"]
    written = await store.read_all(0, 100)
    codes = {e.stream: e.data["code"] for e in written if e.type == "JobRejected"}
    assert codes == {
        "rejected-ok": "duplicate",
        "rejected-lost": "unknown-queue",
        "rejected-sneaky": "forbidden",
        "rejected-huge": "impossible",
    }
    assert [e.stream for e in written if e.type == "JobAdmitted"] == ["job-ok"]


async def test_a_redelivered_batch_changes_nothing_and_a_changed_twin_is_rejected() -> None:
    store = InMemoryEventStore()
    admission = Admission(store, QUEUES)
    assert (
        await admission.decide([SubmitJob(spec=spec("j1")), SubmitJob(spec=spec("j2"))]) == ["admitted"] * 2
    )
    before = await store.last_position()
    assert await Admission(store, QUEUES).decide([SubmitJob(spec=spec("j1"))]) == ["duplicate-ignored"]
    assert await store.last_position() == before
    assert await admission.decide([SubmitJob(spec=spec("j2", cpu="1"))]) == ["rejected"]


async def test_nothing_is_impossible_before_a_node_registers_and_new_nodes_are_seen() -> None:
    store = InMemoryEventStore()
    admission = Admission(store, QUEUES)
    assert await admission.decide([SubmitJob(spec=spec("early", gpus=4))]) == ["admitted"]
    await with_nodes(store)
    assert await admission.decide([SubmitJob(spec=spec("late", gpus=4))]) == ["rejected"]


async def test_a_cancel_sees_a_job_submitted_earlier_in_its_batch() -> None:
    store = InMemoryEventStore()
    admission = Admission(store, QUEUES)
    verdicts = await admission.decide(
        [
            SubmitJob(spec=spec("j1")),
            CancelJob(job_id="j1"),
            CancelJob(job_id="j1"),  # already cancelled: nothing more
            CancelJob(job_id="ghost"),
        ]
    )
    assert verdicts == ["admitted", "cancelled", "ignored", "rejected"]
    assert await kinds(store) == [
        ("job-j1", "JobAdmitted"),
        ("job-j1", "JobCancelled"),
        ("rejected-ghost", "JobRejected"),
    ]


class RacingStore(InMemoryEventStore):
    """Another admission instance admits ``job`` just before this one's first append."""

    def __init__(self, job: JobSpec) -> None:
        super().__init__()
        self.job: JobSpec | None = job

    async def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int], tracking: tuple[str, int] | None = None
    ) -> list[RecordedEvent]:
        if self.job is not None:
            job, self.job = self.job, None
            event = JobAdmitted(spec=job)
            data = event.model_dump(mode="json", by_alias=True)
            await super().append([NewEvent(f"job-{job.id}", event.type, data)], {f"job-{job.id}": NO_STREAM})
        return await super().append(events, expected, tracking)


async def test_losing_a_race_decides_again_against_what_the_winner_wrote() -> None:
    store = RacingStore(spec("j1", cpu="5"))  # the winner's j1 differs from ours
    verdicts = await Admission(store, QUEUES).decide([SubmitJob(spec=spec("j1")), SubmitJob(spec=spec("j2"))])
    assert verdicts == ["rejected", "admitted"]
    assert await kinds(store) == [
        ("job-j1", "JobAdmitted"),
        ("rejected-j1", "JobRejected"),
        ("job-j2", "JobAdmitted"),
    ]
    admitted = await store.read_stream("job-j1")
    assert admitted[0].data["spec"]["resources"]["cpu"] == "5000m"  # the winner's, untouched


async def test_a_shape_impossible_until_a_bigger_node_registers_is_admitted_after() -> None:
    store = InMemoryEventStore()
    await with_nodes(store)  # one GPU
    admission = Admission(store, QUEUES)
    assert await admission.decide([SubmitJob(spec=spec("two", gpus=2))]) == ["rejected"]
    gpus = [GpuDevice(index=i, model="T4") for i in range(4)]
    event = NodeRegistered(inventory=NodeInventory(name="big", cpu="8", memory="16Gi", gpus=gpus))
    data = event.model_dump(mode="json", by_alias=True)
    await store.append([NewEvent("node-big", event.type, data)], {"node-big": 0})
    assert await admission.decide([SubmitJob(spec=spec("two-again", gpus=2))]) == ["admitted"]


TREE = {
    "queues": [
        {
            "name": "org",
            "tenants": ["t", "ops"],
            "children": [
                {"name": "small", "max": {"nvidia.com/gpu": 2}, "tenants": ["t"]},
                {"name": "closed", "tenants": ["ops"]},
                {"name": "open"},  # any tenant org allows
            ],
        }
    ]
}


async def test_an_applied_queue_tree_decides_queues_rights_and_quotas() -> None:
    from schemas.commands import ApplyQueues
    from schemas.queues import QueueTreeSpec

    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    tree = QueueTreeSpec.model_validate(TREE)
    assert await admission.decide([ApplyQueues(tree=tree)]) == ["queues-applied"]
    verdicts = await admission.decide(
        [
            SubmitJob(spec=spec("fits", queue="small")),
            SubmitJob(spec=spec("greedy", queue="small", replicas=3, gpus=1)),  # 3 GPUs > max 2
            SubmitJob(spec=spec("parent", queue="org")),
            SubmitJob(spec=spec("old", queue="default")),  # the env's queues no longer apply
            SubmitJob(spec=spec("outsider", queue="closed")),
            SubmitJob(spec=spec("inside", queue="open")),
            SubmitJob(spec=spec("stranger", queue="open", tenant="ads")),  # org does not allow it
        ]
    )
    assert verdicts == ["admitted", "rejected", "rejected", "rejected", "rejected", "admitted", "rejected"]
    written = await store.read_all(0, 100)
    codes = {e.stream: e.data["code"] for e in written if e.type == "JobRejected"}
    assert codes == {
        "rejected-greedy": "over-quota",
        "rejected-parent": "unknown-queue",
        "rejected-old": "unknown-queue",
        "rejected-outsider": "forbidden",
        "rejected-stranger": "forbidden",
    }
    reasons = {e.stream: e.data["reason"] for e in written if e.type == "JobRejected"}
    assert "'small'" in reasons["rejected-greedy"] and "small" in reasons["rejected-parent"]
    assert "need more gpu than queue 'small'" in reasons["rejected-greedy"]  # the dimension named
    assert "queue 'org', above it, does not allow it" in reasons["rejected-stranger"]
    assert [e.stream for e in written if e.type == "QueuesApplied"] == ["queues"]


async def test_a_tree_the_core_refuses_gets_an_error_event_and_the_applied_tree_stays() -> None:
    from schemas.commands import ApplyQueues
    from schemas.queues import QueueTreeSpec

    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    assert await admission.decide([ApplyQueues(tree=QueueTreeSpec.model_validate(TREE))]) == [
        "queues-applied"
    ]
    # Valid by the schema, refused by the core: "root" names the tree's implicit root.
    bad = QueueTreeSpec.model_validate({"queues": [{"name": "root"}]})
    before = await store.read_all(0, 1000)
    assert await admission.decide([ApplyQueues(tree=bad)]) == ["rejected"]
    written = (await store.read_all(0, 1000))[len(before) :]
    assert [(e.stream, e.type) for e in written] == [("rejected-apply-queues", "CommandRejected")]
    assert written[0].data["command"] == "ApplyQueues"
    assert "'root' is the tree's implicit root" in written[0].data["reason"]
    # The tree applied before still decides.
    assert await admission.decide([SubmitJob(spec=spec("fits", queue="small"))]) == ["admitted"]


async def test_a_queues_large_jobs_rule_raises_large_jobs_that_ask_for_less_and_the_core_sees_it() -> None:
    from schemas.commands import ApplyQueues
    from schemas.queues import QueueTreeSpec
    from shared.state.fold import fold
    from shared.state.wire import core_job

    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    rule = {"min-gpus": 2, "priority-class": "high"}
    tree = {"queues": [{"name": "team", "large-jobs": rule, "children": [{"name": "a"}]}]}
    await admission.decide([ApplyQueues(tree=QueueTreeSpec.model_validate(tree))])
    big = spec("big", queue="a", replicas=2)  # 2 GPUs in all: the rule, inherited from team
    verdicts = await admission.decide(
        [
            SubmitJob(spec=big),
            SubmitJob(spec=spec("small", queue="a")),  # 1 GPU
            SubmitJob(spec=spec("asks-more", queue="a", replicas=2, priority_class="critical")),
            SubmitJob(spec=spec("cpu", queue="a", replicas=4, gpus=0)),
            # Judged by what it needs to start: an elastic job that may start with one GPU is not
            # large, whatever it may grow to; a gang of 4 that starts with 2 is.
            SubmitJob(spec=spec("elastic", queue="a", replicas=4, elastic="1:4")),
            SubmitJob(spec=spec("gang", queue="a", replicas=4, gang={"min-member": 2})),
        ]
    )
    assert verdicts == ["admitted"] * 6
    admitted = {e.data["spec"]["id"]: e.data for e in await store.read_all(0, 100) if e.type == "JobAdmitted"}
    assert {j: d["promoted_class"] for j, d in admitted.items()} == {
        "big": "high",
        "small": None,
        "asks-more": None,
        "cpu": None,
        "elastic": None,
        "gang": "high",
    }
    assert JobSpec.model_validate(admitted["big"]["spec"]) == big  # the spec is kept as submitted
    # A redelivery of the same submission is still recognised as one.
    assert await admission.decide([SubmitJob(spec=big)]) == ["duplicate-ignored"]
    view = fold(await store.read_all(0, 100))
    assert {j: core_job(view.jobs[j]).priority for j in admitted} == {
        "big": 100,
        "small": 0,
        "asks-more": 1000,
        "cpu": 0,
        "elastic": 0,
        "gang": 100,
    }


async def test_a_field_nothing_honours_is_rejected_with_its_name() -> None:
    store = InMemoryEventStore()
    admission = Admission(store, QUEUES)

    def with_field(job: str, extra: dict[str, Any]) -> JobSpec:
        return JobSpec.model_validate({"id": job, "tenant": "t", **extra})

    odd = [
        with_field("numa", {"numa-binding": "required"}),
        with_field("rack", {"rack-affinity": "same-rack"}),
        JobSpec.model_validate(
            {"id": "hami", "tenant": "t", "resources": {"gpu-share": "500m", "gpu-memory": "10Gi"}}
        ),
        JobSpec.model_validate({"id": "mig", "tenant": "t", "resources": {"nvidia.com/mig-1g.10gb": 1}}),
        with_field("sel", {"node-selector": {"zone": "b"}}),
    ]
    assert await admission.decide([SubmitJob(spec=s) for s in odd]) == ["rejected"] * 5
    written = await store.read_all(0, 100)
    reasons = {e.stream.removeprefix("rejected-"): e.data["reason"] for e in written}
    assert {e.data["code"] for e in written} == {"unsupported"}
    assert "numa-binding" in reasons["numa"] and "rack-affinity" in reasons["rack"]
    assert "gpu-memory" in reasons["hami"] and "mig-1g.10gb" in reasons["mig"]
    assert "node-selector.zone" in reasons["sel"]


class AlwaysConflicting(InMemoryEventStore):
    """Another writer wins every race for the same streams."""

    async def append(
        self,
        events: Sequence[NewEvent],
        expected: Mapping[str, int],
        tracking: tuple[str, int] | None = None,
    ) -> list[RecordedEvent]:
        from shared.eventstore import ConcurrencyError

        raise ConcurrencyError({e.stream: (0, 1) for e in events})


async def test_submissions_that_keep_conflicting_are_answered_conflict_not_taken_as_handled() -> None:
    store = AlwaysConflicting()
    verdicts = await Admission(store, QUEUES).decide([SubmitJob(spec=spec("j1")), SubmitJob(spec=spec("j2"))])
    assert verdicts == ["conflict", "conflict"]  # the shell dead-letters these with the reason


async def test_drain_and_uncordon_become_node_facts_and_an_unknown_node_is_rejected() -> None:
    from schemas.commands import DrainNode, UncordonNode

    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    verdicts = await admission.decide(
        [DrainNode(node="a", reason="psu"), UncordonNode(node="a"), DrainNode(node="zz")]
    )
    assert verdicts == ["drained", "uncordoned", "rejected"]
    assert await kinds(store) == [
        ("node-a", "NodeCordoned"),
        ("node-a", "NodeUncordoned"),
        ("rejected-drain-zz", "CommandRejected"),
    ]


class AwayUntil(Faulty):
    """PostgreSQL away for the first ``failures`` appends (dropped before they were written)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def fails(self, events: Sequence[NewEvent]) -> bool:
        if self.failures:
            self.failures -= 1
            return True
        return False


async def test_a_batch_waits_out_an_outage_and_is_admitted_once_the_store_answers() -> None:
    store = AwayUntil(failures=0)
    await with_nodes(store)
    store.failures = 2
    verdicts = await Admission(store, QUEUES).decide_riding_out([SubmitJob(spec=spec("j1"))], asyncio.Event())
    assert verdicts == ["admitted"] and store.failures == 0
    assert await kinds(store) == [("job-j1", "JobAdmitted")]


async def test_a_stop_during_an_outage_ends_the_wait_with_nothing_written() -> None:
    store = AwayUntil(failures=0)
    await with_nodes(store)
    store.failures = 10**6
    stop = asyncio.Event()
    decided = asyncio.create_task(
        Admission(store, QUEUES).decide_riding_out([SubmitJob(spec=spec("j1"))], stop)
    )
    await asyncio.sleep(0.5)  # a few tries, all refused
    assert not decided.done()
    stop.set()
    assert await asyncio.wait_for(decided, 2.0) is None  # the caller commits nothing: it comes again
    assert await kinds(store) == []


async def test_a_cancel_of_a_placed_job_asks_for_its_stop_and_does_not_end_it_yet() -> None:
    """Its processes may still run: ``CancelRequested``, and the preemption service stops them
    before ``JobCancelled`` gives the room back (a second job must not start beside them)."""
    store = InMemoryEventStore()
    await with_nodes(store)
    admission = Admission(store, QUEUES)
    assert await admission.decide([SubmitJob(spec=spec("j1"))]) == ["admitted"]
    placed = JobPlaced(
        job_id="j1",
        bindings=[TaskBinding(task=0, node="a", gpus=[0], gpu_milli=1000, cpu_milli=2000, memory_mib=0)],
        policy="tessera",
        node_versions={},
    )
    await store.append([NewEvent("job-j1", placed.type, placed.model_dump(mode="json"))], {"job-j1": 1})
    assert await admission.decide([CancelJob(job_id="j1", reason="not needed")]) == ["cancelling"]
    assert await admission.decide([CancelJob(job_id="j1")]) == ["ignored"]  # asked once is enough
    kinds_now = await kinds(store)
    assert kinds_now[-1] == ("job-j1", "CancelRequested") and ("job-j1", "JobCancelled") not in kinds_now
    assert kinds_now.count(("job-j1", "CancelRequested")) == 1
