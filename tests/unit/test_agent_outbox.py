"""The agent never drops a task's end: it retries while the store is away, and the end waits in
its outbox, so an agent restarted meanwhile reports it (the in-memory store; no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from schemas import JobSpec
from schemas.events import JobAdmitted, JobCancelled, JobPlaced, JobStarted, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from services.agent.app import Agent
from services.agent.runtime import SimulatedRuntime, TaskEnd
from shared.eventstore import NewEvent, RecordedEvent, StoreUnavailableError
from shared.eventstore.memory import InMemoryEventStore
from shared.settings import Settings
from shared.state.fold import ClusterView
from shared.state.follow import catch_up
from tests.store_faults import Faulty


class Flaky(Faulty):
    """Refuses ``failures`` task ends (``JobFinished``) before writing them."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def fails(self, events: Sequence[NewEvent]) -> bool:
        if self.failures > 0 and any(e.type == "JobFinished" for e in events):
            self.failures -= 1
            return True
        return False


async def _running_job(store: InMemoryEventStore, started: bool = True) -> None:
    inv = NodeInventory(name="n", cpu="8", memory="16Gi", gpus=[GpuDevice(index=0, model="T4")])
    spec = JobSpec.model_validate({"id": "j", "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 1}})
    binding = TaskBinding(task=0, node="n", gpus=[0], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
    for stream, event in (
        ("node-n", NodeRegistered(inventory=inv)),
        ("job-j", JobAdmitted(spec=spec)),
        ("job-j", JobPlaced(job_id="j", bindings=[binding], policy="tessera", node_versions={})),
    ):
        data = event.model_dump(mode="json", by_alias=True)
        await store.append([NewEvent(stream, data["type"], data)], {stream: -1})
    if not started:
        return
    begun = JobStarted(job_id="j", node="n").model_dump(mode="json")
    await store.append(
        [NewEvent("job-j", "JobStarted", begun), NewEvent("task-j-0", "JobStarted", begun)],
        {"job-j": -1, "task-j-0": 0},
    )


async def _agent(store: InMemoryEventStore, folder: Path) -> Agent:
    agent = Agent(Settings(agent_state_dir=str(folder)), [], SimulatedRuntime())
    agent.store = store
    await catch_up(agent.view, store)
    return agent


async def test_a_task_end_is_retried_through_store_outages_until_it_is_recorded(tmp_path: Path) -> None:
    store = Flaky(failures=3)
    await _running_job(store)
    agent = await _agent(store, tmp_path)
    retries = _sample("tessera_store_retries_total")
    ends = _sample("tessera_agent_task_ends_total", "JobFinished")
    await agent._report(TaskEnd("j", 0, 0))
    await catch_up(agent.view, store)
    assert agent.view.jobs["j"].state == "finished" and store.failures == 0
    assert agent.outbox.pending() == []
    # What an operator's Prometheus sees: three waits on the store, one end recorded.
    assert _sample("tessera_store_retries_total") - retries == 3
    assert _sample("tessera_agent_task_ends_total", "JobFinished") - ends == 1


def _sample(name: str, kind: str | None = None) -> float:
    value = REGISTRY.get_sample_value(name, {"type": kind} if kind else {})
    return value or 0.0


async def test_an_end_not_yet_recorded_is_found_and_reported_by_the_next_agent(tmp_path: Path) -> None:
    store = Flaky(failures=10**6)  # the store stays away while the first agent lives
    await _running_job(store)
    first = await _agent(store, tmp_path)
    reporting = asyncio.create_task(first._report(TaskEnd("j", 0, 0)))
    await asyncio.sleep(0.3)
    reporting.cancel()  # the agent dies
    assert [e.job_id for e in first.outbox.pending()] == ["j"]
    store.failures = 0  # the store is back; a new agent starts
    second = await _agent(store, tmp_path)
    for end in second.outbox.pending():
        await second._report(end)
    await catch_up(second.view, store)
    assert second.view.jobs["j"].state == "finished"
    assert second.outbox.pending() == []
    assert _ends(await store.read_all(0, 100)) == 1  # once


def _ends(events: list[RecordedEvent]) -> int:
    return sum(1 for e in events if e.stream == "job-j" and e.type == "JobFinished")


class LostReply(Faulty):
    """Writes the first claim (``JobStarted``), then fails as if the store crashed before the
    reply came back: the caller cannot tell that its append was written."""

    written = True

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def fails(self, events: Sequence[NewEvent]) -> bool:
        if self.lost == 0 and any(e.type == "JobStarted" for e in events):
            self.lost += 1
            return True
        return False


async def test_a_claim_written_before_its_reply_was_lost_is_still_this_agents(tmp_path: Path) -> None:
    """The retry of a claim that was in fact written conflicts; the agent reads the task's stream,
    finds its own claim there and runs the task (before, it took the task for another agent's
    and a real process was then reported lost)."""
    store = LostReply()
    await _running_job(store, started=False)
    agent = await _agent(store, tmp_path)
    record = agent.view.jobs["j"]
    claimed = await agent._claim(store, [(record, record.bindings[0])])
    assert [(r.spec.id, b.task) for r, b in claimed] == [("j", 0)] and store.lost == 1
    starts = [e for e in await store.read_all(0, 100) if e.stream == "task-j-0"]
    assert len(starts) == 1 and starts[0].data["claim"] == agent.claim_id  # written once
    # Another process's claim is not taken for its own.
    other = await _agent(store, tmp_path)
    assert await other._claim(store, [(record, record.bindings[0])]) == []


class Away(Faulty):
    """Once ``away``, refuses every append: PostgreSQL stays away."""

    away = False

    def fails(self, events: Sequence[NewEvent]) -> bool:
        return self.away


async def test_a_stop_ends_a_report_waiting_out_an_outage_and_the_end_stays_in_the_outbox(
    tmp_path: Path,
) -> None:
    store = Away()
    await _running_job(store)
    agent = await _agent(store, tmp_path)
    agent.stop, store.away = asyncio.Event(), True
    reporting = asyncio.create_task(agent._report(TaskEnd("j", 0, 0)))
    await asyncio.sleep(0.5)  # several refused appends; the report waits between two tries
    assert not reporting.done(), "the report gave up while the store was away"
    agent.stop.set()
    await asyncio.wait_for(reporting, 1.0)  # ends at once, without an error
    assert [e.job_id for e in agent.outbox.pending()] == ["j"]  # kept for the next agent
    assert _ends(await store.read_all(0, 100)) == 0


async def test_a_stop_ends_a_claim_waiting_out_an_outage_and_nothing_is_claimed(tmp_path: Path) -> None:
    store = Away()
    await _running_job(store, started=False)
    agent = await _agent(store, tmp_path)
    agent.stop, store.away = asyncio.Event(), True
    record = agent.view.jobs["j"]
    claiming = asyncio.create_task(agent._claim(store, [(record, record.bindings[0])]))
    await asyncio.sleep(0.5)
    assert not claiming.done(), "the claim gave up while the store was away"
    agent.stop.set()
    with pytest.raises(StoreUnavailableError):  # the reconcile loop ends on it (``Agent.run``)
        await asyncio.wait_for(claiming, 1.0)
    assert not [e for e in await store.read_all(0, 100) if e.stream == "task-j-0"]


async def test_a_task_of_a_job_the_view_let_go_is_stopped(tmp_path: Path) -> None:
    """A view keeps only the last ended jobs (``keep_ended``); should a job end and be let go in
    one batch, the agent still stops what it ran for it."""
    store = InMemoryEventStore()
    await _running_job(store, started=False)
    inv = NodeInventory(name="n", cpu="8", memory="16Gi", gpus=[GpuDevice(index=0, model="T4")])
    runtime = SimulatedRuntime(default_duration_s=3600.0)
    agent = Agent(Settings(agent_state_dir=str(tmp_path)), [inv], runtime)
    agent.store = store
    agent.view = ClusterView(keep_ended=0)  # let every ended job go at once
    await catch_up(agent.view, store)
    await agent._act_on(store, ["j"])
    assert runtime.running() == 1
    cancelled = JobCancelled(job_id="j").model_dump(mode="json", by_alias=True)
    await store.append([NewEvent("job-j", "JobCancelled", cancelled)], {"job-j": 3})
    await catch_up(agent.view, store)
    assert "j" not in agent.view.jobs
    await agent._act_on(store, ["j"])
    assert runtime.running() == 0
