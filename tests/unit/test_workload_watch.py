"""A learnt workload is stale once a job needs nodes no learnt shape needs
(``shared/core/workload_watch.py``), and a placement worker then relearns it at once."""

from __future__ import annotations

from schemas import JobSpec
from schemas.events import JobAdmitted, NodeRegistered
from schemas.node import GpuDevice, NodeInventory
from services.placement.app import Worker
from shared.core.workload_watch import Relearning, WorkloadWatch
from shared.eventstore import NewEvent
from shared.eventstore.memory import InMemoryEventStore
from shared.settings import Settings
from shared.state.follow import catch_up
from tests.unit.builders import cluster, node, task

# openb's two kinds of 8-GPU node: 96 cores (G2) and 128 cores (G3), and a V100 node.
NODES = cluster(
    node("g2", cpu=96_000, mem=786_432, model="G2"),
    node("g3", cpu=128_000, mem=786_432, model="G3"),
    node("v100", cpu=96_000, mem=786_432, model="V100M32"),
)


def test_a_shape_that_only_the_largest_nodes_hold_is_novel() -> None:
    watch = WorkloadWatch(NODES, [task(cpu=8_000, gpus=1), task(cpu=4_000, gpus=1, milli=500)])
    assert watch.novel([task(cpu=120_000, gpus=8)]) == task(cpu=120_000, gpus=8)


def test_new_shapes_that_every_node_holds_are_not_novel() -> None:
    watch = WorkloadWatch(NODES, [task(cpu=8_000, gpus=1)])
    # Other sizes, and a share: every node kind still holds each of them.
    others = [task(cpu=12_000, gpus=2), task(cpu=2_000, gpus=1, milli=250), task(cpu=64_000)]
    assert watch.novel(others) is None


def test_a_gpu_model_constraint_is_a_reach_of_its_own_until_learnt() -> None:
    pinned = task(cpu=8_000, gpus=1, models=("V100M32",))
    watch = WorkloadWatch(NODES, [task(cpu=8_000, gpus=1)])
    assert watch.novel([pinned]) == pinned
    learnt = WorkloadWatch(NODES, [task(cpu=8_000, gpus=1), task(cpu=4_000, gpus=2, models=("V100M32",))])
    assert learnt.novel([pinned]) is None  # same nodes as a pinned shape it learnt


def test_the_cpu_only_shape_that_only_large_nodes_hold_is_novel() -> None:
    watch = WorkloadWatch(NODES, [task(cpu=8_000)])
    assert watch.novel([task(cpu=100_000)]) == task(cpu=100_000)


def _inventory(name: str, cores: int, model: str) -> NodeInventory:
    gpus = [GpuDevice(index=i, model=model) for i in range(8)]
    return NodeInventory(name=name, cpu=str(cores), memory="768Gi", gpus=gpus)


def _job(job_id: str, cores: int, gpus: int) -> JobSpec:
    resources = {"cpu": str(cores), "memory": "8Gi", "nvidia.com/gpu": gpus}
    return JobSpec.model_validate({"id": job_id, "tenant": "t", "resources": resources})


async def _append(store: InMemoryEventStore, stream: str, event: NodeRegistered | JobAdmitted) -> None:
    data = event.model_dump(mode="json", by_alias=True)
    await store.append([NewEvent(stream, data["type"], data)], {stream: -1})


async def test_a_worker_relearns_its_workload_when_a_job_needs_nodes_no_seen_job_needed() -> None:
    store = InMemoryEventStore()
    await _append(store, "node-g2", NodeRegistered(inventory=_inventory("g2", 96, "G2")))
    await _append(store, "node-g3", NodeRegistered(inventory=_inventory("g3", 128, "G3")))
    for i in range(3):
        await _append(store, f"job-s{i}", JobAdmitted(spec=_job(f"s{i}", 8, 1)))
    worker = Worker(Settings(), "w1", "tessera")
    await catch_up(worker.view, store)
    first = worker.profile()
    # Another size that both kinds of node hold: the learnt workload still describes it.
    await _append(store, "job-m", JobAdmitted(spec=_job("m", 16, 2)))
    await catch_up(worker.view, store)
    assert worker.profile() is first
    # Far fewer than four times the jobs seen, but only the 128-core node holds this one.
    await _append(store, "job-big", JobAdmitted(spec=_job("big", 120, 8)))
    await catch_up(worker.view, store)
    second = worker.profile()
    assert second is not first
    assert worker.profile() is second  # learnt: no further rebuild for it


def test_relearning_says_why_in_order_of_cost() -> None:
    small, large = task(cpu=8_000, gpus=1), task(cpu=120_000, gpus=8)
    relearning = Relearning()
    assert relearning.due(NODES.names, 1, [small]) == "first jobs"
    relearning.learnt(NODES, 20, [small] * 20)  # every job that came is known
    assert relearning.due(NODES.names, 79, [small]) is None
    assert relearning.due(NODES.names, 80, [large]) == "the jobs seen grew 4-fold"
    assert relearning.due(NODES.names[:2], 21, [small]) == "the nodes changed"
    assert "needs nodes no seen job needed" in str(relearning.due(NODES.names, 21, [large]))
    assert relearning.due(NODES.names, 22, [large]) is None  # looked at once: the caller relearns


def test_a_worker_that_knows_a_window_of_jobs_relearns_as_the_window_moves() -> None:
    small = task(cpu=8_000, gpus=1)
    relearning = Relearning()
    relearning.learnt(NODES, 100_000, [small] * 10_000)  # 100,000 came, the last 10,000 known
    assert relearning.due(NODES.names, 129_999, [small]) is None
    assert relearning.due(NODES.names, 130_000, [small]) == "the jobs seen grew 4-fold"
