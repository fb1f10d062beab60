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

from schemas.events import JobFailed, JobFinished, JobStarted, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from services.agent.runtime import ProcessRuntime, Runtime, SimulatedRuntime
from shared.bus import ensure_topics
from shared.eventstore import ANY_VERSION, NO_STREAM, ConcurrencyError, NewEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.service import run_service
from shared.settings import Settings
from shared.sim.trace import load_nodes
from shared.state.fold import ACTIVE, TERMINAL, ClusterView, JobRecord
from shared.state.follow import catch_up, follow_log, restore
from shared.state.readiness import mark_ready
from shared.state.wire import job_stream, node_stream

log = logging.getLogger("tessera.agent")
START_CHUNK = 200  # tasks claimed per transaction


def task_stream(job_id: str, task: int, attempt: int = 0) -> str:
    """One stream per task and attempt: a task runs again after a preemption, once per attempt."""
    return f"task-{job_id}-{task}" if attempt == 0 else f"task-{job_id}-a{attempt}-{task}"


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
        self._mine: dict[str, set[int]] = {}  # job -> tasks this process started or resumed
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
        caught_up_at = time.time()
        await catch_up(self.view, store)
        follower = await follow_log(self.view, store, s, caught_up_at)
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
        """Act on the jobs whose events arrived since the last call (all of them after a restore)."""
        changed = self.view.drain_changed()
        try:
            await self._act_on(store, changed)
        except BaseException:
            self.view.mark_changed(changed)  # not handled: look at them again next time
            raise

    async def _act_on(self, store: PostgresEventStore, job_ids: list[str]) -> None:
        now = time.time()
        to_start: list[tuple[JobRecord, TaskBinding]] = []
        for job_id in job_ids:
            record = self.view.jobs.get(job_id)
            if record is None:
                continue
            if record.state in TERMINAL:
                if self._mine.pop(job_id, None) is not None and record.state == "cancelled":
                    self.runtime.stop(job_id)
                continue
            if record.state not in ACTIVE:
                continue
            mine = self._mine.get(job_id, set())
            for binding in record.bindings:
                if binding.node not in self.names or binding.task in mine or binding.task in record.done:
                    continue
                if binding.task in record.started:
                    # Started before this process: resume a simulated task, report a lost process.
                    self._mine.setdefault(job_id, set()).add(binding.task)
                    if isinstance(self.runtime, SimulatedRuntime):
                        await self.runtime.start(
                            record.spec, binding, record.started[binding.task], now, self._done
                        )
                    else:
                        await self._done(
                            job_id, binding.task, -1, "the process was lost when its agent restarted"
                        )
                    continue
                to_start.append((record, binding))
        for chunk_start in range(0, len(to_start), START_CHUNK):
            chunk = to_start[chunk_start : chunk_start + START_CHUNK]
            for record, binding in await self._claim(store, chunk):
                self._mine.setdefault(record.spec.id, set()).add(binding.task)
                pid = await self.runtime.start(record.spec, binding, now, now, self._done)
                level = logging.INFO if pid is not None else logging.DEBUG  # simulated: thousands/s
                log.log(level, "started %s/%d on %s pid=%s", record.spec.id, binding.task, binding.node, pid)

    async def _claim(
        self, store: PostgresEventStore, tasks: list[tuple[JobRecord, TaskBinding]]
    ) -> list[tuple[JobRecord, TaskBinding]]:
        """Record ``JobStarted`` for each task, exactly once: the task stream must not exist yet.

        One transaction for them all (a busy node set starts hundreds of tasks per second); if
        another agent instance claimed any of them first, claim them one by one to learn which.
        """

        def started(record: JobRecord, binding: TaskBinding) -> tuple[list[NewEvent], dict[str, int]]:
            job_id = record.spec.id
            attempt = record.status.attempt
            event = JobStarted(job_id=job_id, node=binding.node, task=binding.task, attempt=attempt)
            data = event.model_dump(mode="json")
            task = task_stream(job_id, binding.task, attempt)
            events = [NewEvent(job_stream(job_id), event.type, data), NewEvent(task, event.type, data)]
            return events, {job_stream(job_id): ANY_VERSION, task: NO_STREAM}

        events: list[NewEvent] = []
        expected: dict[str, int] = {}
        for record, binding in tasks:
            e, x = started(record, binding)
            events += e
            expected.update(x)
        try:
            await store.append(events, expected)
            return tasks
        except ConcurrencyError:
            if len(tasks) == 1:
                return []  # another agent instance started it
        claimed = []
        for one in tasks:
            claimed += await self._claim(store, [one])
        return claimed

    async def _done(self, job_id: str, task: int, exit_code: int | None, reason: str) -> None:
        assert self.store is not None
        record = self.view.jobs.get(job_id)
        if record is None or record.state in TERMINAL:
            return
        node = next(b.node for b in record.bindings if b.task == task)
        attempt = record.status.attempt
        end: JobFinished | JobFailed
        if exit_code is None:
            end = JobFinished(job_id=job_id, node=node, task=task, attempt=attempt)
        else:
            end = JobFailed(
                job_id=job_id, node=node, task=task, attempt=attempt, exit_code=exit_code, reason=reason
            )
        data = end.model_dump(mode="json")
        # Not on the node's stream: a release only adds room, so it must not move the node's
        # version and fail a placement planned before it (the fold frees from the job's stream).
        events = [
            NewEvent(job_stream(job_id), end.type, data),
            NewEvent(task_stream(job_id, task, attempt), end.type, data),
        ]
        expected = {job_stream(job_id): ANY_VERSION, task_stream(job_id, task, attempt): 1}
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
