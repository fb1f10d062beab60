"""Node agent: registers its node(s), runs the tasks bound to them, reports back.

One process serves one real node (``--mode process``: inventory read from this machine, tasks run
as pinned subprocesses) or many simulated ones (``--mode simulated --nodes CSV``: tasks finish
after their duration).  Starting and finishing are exactly-once through the event store: a task's
``JobStarted`` is appended to ``task-<job>-<i>`` expecting no stream, its end expecting version 1,
so a restarted or duplicated agent can never run a task twice or end it twice.  On restart the
agent rebuilds its view from the store, resumes simulated tasks where they were, starts tasks
bound while it was down, and reports tasks whose process it lost as failed.

Run: ``python -m services.agent.app --mode simulated --nodes loadtests/...csv --limit 100``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path

from schemas.events import JobFailed, JobFinished, JobStarted, NodeRegistered
from schemas.node import GpuDevice, NodeInventory
from services.agent.runtime import ProcessRuntime, Runtime, SimulatedRuntime
from shared.bus import ensure_topics
from shared.eventstore import ANY_VERSION, NO_STREAM, ConcurrencyError, NewEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.service import run_service
from shared.settings import Settings
from shared.sim.trace import load_nodes
from shared.state.fold import TERMINAL, ClusterView
from shared.state.follow import EventFollower, catch_up, restore
from shared.state.readiness import mark_ready
from shared.state.wire import job_stream, node_stream

log = logging.getLogger("tessera.agent")


def task_stream(job_id: str, task: int) -> str:
    return f"task-{job_id}-{task}"


def machine_inventory(name: str) -> NodeInventory:
    """This machine: CPUs this process may use, memory, and GPUs through NVML when a driver is present."""
    cpus = len(os.sched_getaffinity(0))
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    gpus: list[GpuDevice] = []
    try:
        import pynvml

        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            model = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(
                GpuDevice(
                    index=i,
                    uuid=str(pynvml.nvmlDeviceGetUUID(handle)),
                    model=str(model).replace("NVIDIA ", "").replace(" ", "-"),
                    memory=f"{memory // 2**20}Mi",
                )
            )
        pynvml.nvmlShutdown()
    except Exception:  # no driver / no library: a CPU node
        gpus = []
    return NodeInventory(name=name, cpu=cpus, memory=f"{mem_kib // 1024}Mi", gpus=gpus)


def simulated_inventories(csv: Path, limit: int | None, prefix: str = "") -> list[NodeInventory]:
    out = []
    for spec in load_nodes(csv)[:limit]:
        gpus = [GpuDevice(index=i, model=spec.gpu_model) for i in range(spec.gpu_count)]
        out.append(
            NodeInventory(
                name=prefix + spec.name, cpu=f"{spec.cpu_milli}m", memory=f"{spec.memory_mib}Mi", gpus=gpus
            )
        )
    return out


class Agent:
    def __init__(self, settings: Settings, inventories: list[NodeInventory], runtime: Runtime) -> None:
        self.settings = settings
        self.inventories = inventories
        self.names = {i.name for i in inventories}
        self.runtime = runtime
        self.view = ClusterView()
        self._mine: set[tuple[str, int]] = set()  # tasks this process started or resumed
        self.store: PostgresEventStore | None = None
        self.ready_name = os.environ.get("TESSERA_SERVICE_NAME", "agent")

    async def register(self, store: PostgresEventStore) -> None:
        await catch_up(self.view, store)
        batch: list[NewEvent] = []
        for inv in self.inventories:
            if self.view.inventories.get(inv.name) == inv:
                continue
            event = NodeRegistered(inventory=inv)
            batch.append(
                NewEvent(node_stream(inv.name), event.type, event.model_dump(mode="json", by_alias=True))
            )
        for start in range(0, len(batch), 200):
            chunk = batch[start : start + 200]
            await store.append(chunk, {e.stream: ANY_VERSION for e in chunk})

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        await ensure_topics(s.kafka_bootstrap_servers, s.topic_partitions, names=s.topics)
        self.store = store = await PostgresEventStore.connect(s.database_url, max_size=6)
        self.view = await restore(store)  # snapshot plus tail
        await self.register(store)
        await catch_up(self.view, store)
        follower = EventFollower(self.view, s.kafka_bootstrap_servers, s.topics.events)
        follow = asyncio.create_task(follower.run(stop))
        mark_ready(self.ready_name)
        try:
            while not stop.is_set():
                await self._reconcile(store)
                follower.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.changed.wait(), 0.5)
        finally:
            stop.set()
            await asyncio.gather(follow, return_exceptions=True)
            await store.close()

    async def _reconcile(self, store: PostgresEventStore) -> None:
        now = time.time()
        for job_id, record in list(self.view.jobs.items()):
            if record.state == "cancelled":
                if any(k[0] == job_id for k in self._mine):
                    self.runtime.stop(job_id)
                    self._mine = {k for k in self._mine if k[0] != job_id}
                continue
            if record.state not in ("placed", "running"):
                continue
            for binding in record.bindings:
                key = (job_id, binding.task)
                if binding.node not in self.names or key in self._mine or binding.task in record.done:
                    continue
                if binding.task in record.started:
                    # Started before this process: resume a simulated task, report a lost process.
                    self._mine.add(key)
                    if isinstance(self.runtime, SimulatedRuntime):
                        await self.runtime.start(
                            record.spec, binding, record.started[binding.task], now, self._done
                        )
                    else:
                        await self._done(
                            job_id, binding.task, -1, "the process was lost when its agent restarted"
                        )
                    continue
                started = JobStarted(job_id=job_id, node=binding.node, task=binding.task)
                data = started.model_dump(mode="json")
                events = [
                    NewEvent(job_stream(job_id), started.type, data),
                    NewEvent(task_stream(job_id, binding.task), started.type, data),
                ]
                try:
                    await store.append(
                        events,
                        {job_stream(job_id): ANY_VERSION, task_stream(job_id, binding.task): NO_STREAM},
                    )
                except ConcurrencyError:
                    continue  # another agent instance started it
                self._mine.add(key)
                pid = await self.runtime.start(record.spec, binding, now, now, self._done)
                log.info("started %s/%d on %s pid=%s", job_id, binding.task, binding.node, pid)

    async def _done(self, job_id: str, task: int, exit_code: int | None, reason: str) -> None:
        assert self.store is not None
        record = self.view.jobs.get(job_id)
        if record is None or record.state in TERMINAL:
            return
        node = next(b.node for b in record.bindings if b.task == task)
        end: JobFinished | JobFailed
        if exit_code is None:
            end = JobFinished(job_id=job_id, node=node, task=task)
        else:
            end = JobFailed(job_id=job_id, node=node, task=task, exit_code=exit_code, reason=reason)
        data = end.model_dump(mode="json")
        events = [
            NewEvent(job_stream(job_id), end.type, data),
            NewEvent(task_stream(job_id, task), end.type, data),
            NewEvent(node_stream(node), end.type, data),  # moves the node's version: its resources changed
        ]
        expected = {
            job_stream(job_id): ANY_VERSION,
            task_stream(job_id, task): 1,
            node_stream(node): ANY_VERSION,
        }
        for _ in range(5):
            try:
                await self.store.append(events, expected)
                return
            except ConcurrencyError:
                return  # already ended by another instance
            except OSError:
                await asyncio.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description="Tessera node agent")
    parser.add_argument("--mode", choices=["process", "simulated"], default="process")
    parser.add_argument("--name", default=os.uname().nodename, help="process mode: this node's name")
    parser.add_argument("--nodes", type=Path, help="simulated mode: node list CSV (openb format)")
    parser.add_argument("--limit", type=int, default=None, help="simulated mode: first N nodes of the CSV")
    parser.add_argument("--prefix", default="", help="simulated mode: prefix for node names")
    parser.add_argument("--speedup", type=float, default=1.0, help="simulated mode: divide durations by this")
    args = parser.parse_args()
    runtime: Runtime
    if args.mode == "process":
        inventories = [machine_inventory(args.name)]
        runtime = ProcessRuntime()
    else:
        if args.nodes is None:
            parser.error("--nodes is required in simulated mode")
        inventories = simulated_inventories(args.nodes, args.limit, args.prefix)
        runtime = SimulatedRuntime(speedup=args.speedup)
    run_service(Agent(Settings(), inventories, runtime).run)


if __name__ == "__main__":
    main()
