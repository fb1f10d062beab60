"""A placement worker rides out PostgreSQL going away in the middle of its append: it neither
exits nor places a job twice (the in-memory store, failing as PostgreSQL does; no broker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition

from schemas import JobSpec
from schemas.events import JobAdmitted, NodeRegistered
from schemas.node import GpuDevice, NodeInventory
from services.placement.app import Worker
from shared.eventstore import NewEvent, StoreUnavailableError
from shared.settings import Settings
from shared.state.fold import SNAPSHOT_NAME
from shared.state.follow import catch_up
from tests.store_faults import Faulty

TP = TopicPartition("tessera.placement", 0)


class PlacementFails(Faulty):
    """Fails the first placement (``JobPlaced``) once; ``written``: after writing it."""

    def __init__(self, written: bool) -> None:
        super().__init__()
        self.written = written
        self.failed = 0

    def fails(self, events: Sequence[NewEvent]) -> bool:
        if self.failed == 0 and any(e.type == "JobPlaced" for e in events):
            self.failed += 1
            return True
        return False


class _Follower:
    changed = asyncio.Event()


class _Consumer:
    def __init__(self) -> None:
        self.committed: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.committed.append(offsets)


async def _admitted(store: Faulty) -> None:
    inv = NodeInventory(name="n", cpu="8", memory="16Gi", gpus=[GpuDevice(index=0, model="T4")])
    spec = JobSpec.model_validate({"id": "j", "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 1}})
    for stream, event in (("node-n", NodeRegistered(inventory=inv)), ("job-j", JobAdmitted(spec=spec))):
        data = event.model_dump(mode="json", by_alias=True)
        await store.append([NewEvent(stream, data["type"], data)], {stream: -1})


@pytest.mark.parametrize("written", [False, True], ids=["dropped-before-writing", "reply-lost"])
async def test_an_append_cut_off_by_an_outage_is_retried_and_places_the_job_once(written: bool) -> None:
    store = PlacementFails(written)
    await _admitted(store)
    worker = Worker(Settings(), "w1", "tessera")
    await catch_up(worker.view, store)
    worker.work.add(TP, 0, "j", position=2)
    consumer = _Consumer()
    stop = asyncio.Event()
    place: Any = worker._place
    task = asyncio.create_task(place(store, _Follower(), consumer, stop))
    for _ in range(100):
        if consumer.committed or task.done():
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 5.0)  # raises if the worker gave up on the outage
    placed = [e for e in await store.read_stream("job-j") if e.type == "JobPlaced"]
    assert store.failed == 1 and len(placed) == 1  # the outage was met, the job placed once
    assert consumer.committed == [{TP: 1}]  # its work item is done


class SnapshotsFail(Faulty):
    """Away for the first ``failures`` snapshot checks, then back."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def snapshot_position(self, name: str) -> int:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("connection refused")
        return await super().snapshot_position(name)

    @contextlib.asynccontextmanager
    async def exclusive(self, key: int) -> AsyncIterator[bool]:
        yield True  # one worker here: the lock is always its own


async def test_the_snapshot_task_skips_rounds_while_the_store_is_away_then_saves() -> None:
    store = SnapshotsFail(failures=3)
    await _admitted(store)
    for i in range(120):  # past the smallest snapshot_every (100 events)
        data = JobAdmitted(spec=JobSpec.model_validate({"id": f"k{i}", "tenant": "t"})).model_dump(
            mode="json", by_alias=True
        )
        await store.append([NewEvent(f"job-k{i}", data["type"], data)], {f"job-k{i}": -1})
    worker = Worker(Settings(snapshot_every=100), "w1", "tessera")
    await catch_up(worker.view, store)
    stop = asyncio.Event()
    snapshots: Any = worker._snapshots
    task = asyncio.create_task(snapshots(store, stop, every_s=0.01))
    for _ in range(200):
        if await store.load_snapshot(SNAPSHOT_NAME) is not None or task.done():
            break
        await asyncio.sleep(0.01)
    assert not task.done(), "the snapshot task ended on the outage"
    saved = await store.load_snapshot(SNAPSHOT_NAME)
    assert store.failures == 0 and saved is not None and saved[0] == worker.view.position
    stop.set()
    await asyncio.wait_for(task, 1.0)
