"""The chaos run's scheduling mix (``loadtests/chaos_mix.py``): the draw, and the log checks
catching what they are for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from loadtests.chaos_mix import RESEARCH_MAX, mix_faults, mixed, tree
from schemas import JobSpec
from schemas.events import (
    JobAdmitted,
    JobFinished,
    JobPlaced,
    JobReserved,
    NodeRegistered,
    QueuesApplied,
    ReservationReleased,
    TaskBinding,
)
from schemas.node import GpuDevice, NodeInventory
from shared.eventstore.port import RecordedEvent
from shared.state.wire import queue_tree


class Events(list[RecordedEvent]):
    def add(self, stream: str, event: Any) -> None:
        data = event.model_dump(mode="json", by_alias=True)
        version = 1 + sum(e.stream == stream for e in self)
        at = datetime.fromtimestamp(1_000_000 + len(self), UTC)
        self.append(RecordedEvent(len(self) + 1, stream, version, data["type"], data, {}, at))


def _log(research_gpus: int) -> Events:
    log = Events()
    gpus = [GpuDevice(index=i, model="T4") for i in range(8)]
    log.add("node-n", NodeRegistered(inventory=NodeInventory(name="n", cpu="64", memory="256Gi", gpus=gpus)))
    log.add("queues", QueuesApplied(tree=tree(8, research_gpus / 8)))
    return log


def _admit(log: Events, job: str, queue: str, **extra: object) -> None:
    body: dict[str, object] = {"id": job, "tenant": queue, "queue": queue, "resources": {"nvidia.com/gpu": 1}}
    log.add(f"job-{job}", JobAdmitted(spec=JobSpec.model_validate(body | extra)))


def _place(log: Events, job: str, first_gpu: int, replicas: int = 1) -> None:
    bindings = [
        TaskBinding(task=t, node="n", gpus=[first_gpu + t], gpu_milli=1000, cpu_milli=0, memory_mib=0)
        for t in range(replicas)
    ]
    event = JobPlaced(job_id=job, bindings=bindings, policy="tessera", node_versions={})
    log.add(f"job-{job}", event)
    log.add("node-n", event)


def test_a_placement_past_a_parents_max_is_counted_and_one_after_room_freed_is_not() -> None:
    log = _log(research_gpus=2)
    for job, queue in (("a", "nlp"), ("b", "vision"), ("c", "nlp"), ("p", "prod")):
        _admit(log, job, queue)
    _place(log, "a", 0)
    _place(log, "b", 1)
    _place(log, "p", 2)  # prod has no max
    assert mix_faults(log).max_passed == 0
    _place(log, "c", 3)  # research holds 3 of its 2
    counts = mix_faults(log)
    assert (counts.max_passed, counts.max_checked) == (1, 3)
    clean = _log(research_gpus=2)
    for job, queue in (("a", "nlp"), ("b", "vision"), ("c", "nlp")):
        _admit(clean, job, queue)
    _place(clean, "a", 0)
    _place(clean, "b", 1)
    clean.add("job-a", JobFinished(job_id="a", node="n", task=0))
    _place(clean, "c", 0)
    assert mix_faults(clean).max_passed == 0


def test_a_task_that_ended_holds_nothing_while_the_rest_of_its_job_runs() -> None:
    log = _log(research_gpus=2)
    _admit(log, "g", "nlp", replicas=2, gang={"min-member": 2})
    _admit(log, "c", "vision")
    _place(log, "g", 0, replicas=2)
    log.add("job-g", JobFinished(job_id="g", node="n", task=0))  # one replica done, one runs
    _place(log, "c", 0)
    counts = mix_faults(log)
    assert (counts.max_passed, counts.max_checked) == (0, 2)


def test_a_gang_placed_short_of_its_min_member_is_counted() -> None:
    log = _log(research_gpus=8)
    _admit(log, "g", "prod", replicas=3, gang={"min-member": 3})
    _admit(log, "h", "prod", replicas=2, gang={"min-member": 2})
    _place(log, "g", 0, replicas=2)
    _place(log, "h", 4, replicas=2)
    counts = mix_faults(log)
    assert (counts.placed_short, counts.gangs) == (1, 2)


def test_the_draw_is_the_jobs_own_and_every_tree_is_one_the_core_accepts() -> None:
    base = JobSpec.model_validate({"id": "pod-1", "tenant": "openb", "resources": {"nvidia.com/gpu": 1}})
    assert mixed(base, 7) == mixed(base, 7)
    drawn = [mixed(base.model_copy(update={"id": f"pod-{i}"}), 7) for i in range(400)]
    assert {j.queue for j in drawn} == {"prod", "nlp", "vision"}
    assert all(j.tenant == j.queue for j in drawn)
    gangs = [j for j in drawn if j.gang is not None]
    elastic = [j for j in drawn if j.elastic is not None]
    assert 25 <= len(gangs) <= 75 and 25 <= len(elastic) <= 75
    assert all(j.checkpointable for j in gangs + elastic)
    assert {j.priority_class for j in drawn if j.queue == "prod"} == {"high", "normal"}
    assert {j.priority_class for j in drawn if j.queue != "prod"} == {"best-effort", "normal"}
    for gpus in (8, 60, 400):
        for share in (RESEARCH_MAX, 0.3):
            assert queue_tree(tree(gpus, share)).barred("nlp", "nlp") is None


def test_a_reservation_on_a_node_another_waiting_job_holds_is_counted() -> None:
    log = _log(research_gpus=8)
    for job in ("g", "h", "k"):
        _admit(log, job, "prod", replicas=2, gang={"min-member": 2})
    log.add("job-g", JobReserved(job_id="g", nodes=["n"], expected_start=0.0, timeout_at=60.0))
    log.add("job-h", JobReserved(job_id="h", nodes=["n"], expected_start=0.0, timeout_at=60.0))  # twice
    log.add("job-g", ReservationReleased(job_id="g", reason="timeout", backoff_until=0.0))
    log.add("job-h", ReservationReleased(job_id="h", reason="timeout", backoff_until=0.0))
    log.add("job-k", JobReserved(job_id="k", nodes=["n"], expected_start=0.0, timeout_at=60.0))  # free again
    log.add("job-k", ReservationReleased(job_id="k", reason="timeout", backoff_until=0.0))
    # Preemptors may share a node (each holds the room its own victims free); not with a gang.
    for job in ("p", "q"):
        _admit(log, job, "prod", replicas=1)
        held = JobReserved(job_id=job, nodes=["n"], expected_start=0.0, timeout_at=60.0, preemption=True)
        log.add(f"job-{job}", held)
    _admit(log, "r", "prod", replicas=2, gang={"min-member": 2})
    log.add("job-r", JobReserved(job_id="r", nodes=["n"], expected_start=0.0, timeout_at=60.0))  # twice
    counts = mix_faults(log)
    assert (counts.reserved_twice, counts.reservations, counts.shared_by_preemptors) == (2, 6, 1)
