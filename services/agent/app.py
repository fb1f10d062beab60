"""Node agent: registers its node(s), runs the tasks bound to them, reports back.

One process serves one real node (``--mode process``: inventory read from this machine, tasks run
as pinned subprocesses) or many simulated ones (``--mode simulated --nodes CSV``: tasks finish
after their duration).  Starting and finishing are exactly-once through the event store: a task's
``JobStarted`` is appended to its attempt's task stream expecting no stream, its end
(``JobFinished``, ``JobFailed``, or ``TaskStopped`` after an eviction) expecting version 1, so a
restarted or duplicated agent can never run a task twice or end it twice.  An ``EvictionStarted``
is carried out with the checkpoint protocol (``services/agent/runtime.py``); a task evicted before
it started is claimed stopped (its stream created by ``TaskStopped``), so it never starts.  Every
``heartbeat_s`` the agent renews its nodes' lease on ``tessera.heartbeats``.  On restart the agent
rebuilds its view from the store, reports the ends its outbox kept, resumes simulated tasks where
they were, starts tasks bound while it was down, and reports tasks whose process it lost as failed
(a task's process dies with its agent: ``PR_SET_PDEATHSIG``).

Run: ``python -m services.agent.app --mode simulated --nodes loadtests/...csv --limit 100``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import time
import uuid
from pathlib import Path

from schemas.events import JobFailed, JobFinished, JobStarted, NodeRegistered, TaskBinding, TaskStopped
from schemas.node import GpuDevice, NodeHeartbeat, NodeInventory
from services.agent.runtime import ProcessRuntime, Runtime, SimulatedRuntime, TaskEnd, TaskRun
from shared import metrics
from shared.bus import BusProducer
from shared.eventstore import (
    ANY_VERSION,
    NO_STREAM,
    ConcurrencyError,
    EventStore,
    NewEvent,
    StoreUnavailableError,
)
from shared.eventstore.postgres import PostgresEventStore
from shared.eventstore.retry import until_available
from shared.pause import pause
from shared.service import run_service, service_topics
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


class Outbox:
    """Task ends not yet in the event log, one file each, so neither a store outage nor a restart
    loses one: written before the append, removed after it (or once another writer ended the
    task); a restarted agent reports what it finds here before anything else."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, end: TaskEnd) -> Path:
        return self.folder / f"{end.job_id}.{end.task}.{end.attempt}.json"

    def put(self, end: TaskEnd) -> None:
        tmp = self._path(end).with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(end)))
        tmp.replace(self._path(end))

    def remove(self, end: TaskEnd) -> None:
        self._path(end).unlink(missing_ok=True)

    def pending(self) -> list[TaskEnd]:
        return [TaskEnd(**json.loads(p.read_text())) for p in sorted(self.folder.glob("*.json"))]


class Agent:
    def __init__(self, settings: Settings, inventories: list[NodeInventory], runtime: Runtime) -> None:
        self.settings = settings
        self.inventories = inventories
        self.names = {i.name for i in inventories}
        self.runtime = runtime
        metrics.AGENT_TASKS_RUNNING.set_function(lambda: float(runtime.running()))
        self.view = ClusterView()
        self._mine: dict[str, tuple[int, set[int]]] = {}  # job -> (attempt, tasks) this process runs
        self._stopping: set[tuple[str, int, int]] = set()  # (job, task, attempt) eviction handled
        self.store: EventStore | None = None
        # Set while ``run`` lives: a claim or a report waiting out a store outage ends on it (the
        # claim is made again after a restart; the end stays in the outbox and is reported then).
        self.stop: asyncio.Event | None = None
        self.ready_name = settings.service_name or "agent"
        self.outbox = Outbox(Path(settings.agent_state_dir) / self.ready_name / "outbox")
        self.claim_id = uuid.uuid4().hex  # names this process's claims (JobStarted.claim)
        self.checkpoints = Path(settings.checkpoint_root).resolve()

    async def register(self, store: EventStore) -> None:
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
        self.stop = stop
        await service_topics(s)
        store = await PostgresEventStore.connect(s.database_url, max_size=6, wait_s=s.start_wait_s)
        self.store = store
        self.view = await restore(store, keep_ended=self.settings.keep_ended_jobs)  # snapshot plus tail
        await self.register(store)
        for end in self.outbox.pending():  # ends a crash kept from the log: report them first
            await self._report(end)
        caught_up_at = time.time()
        await catch_up(self.view, store)
        follower = await follow_log(self.view, store, s, caught_up_at)
        tasks = [asyncio.create_task(follower.run(stop)), asyncio.create_task(self._heartbeats(stop))]
        mark_ready(self.ready_name)
        try:
            while not stop.is_set():
                # A restart or crash of PostgreSQL: the jobs stay marked changed and are looked
                # at again once it answers; running tasks go on meanwhile.  Only the port's
                # error counts as the store away: reconciling also starts processes.
                try:
                    await until_available(
                        functools.partial(self._reconcile, store),
                        "reconciling tasks",
                        stop=stop,
                        errors=StoreUnavailableError,
                    )
                except OSError:
                    if not stop.is_set():
                        raise
                    break  # stopping while the store is away (a claim's wait ended too)
                follower.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.changed.wait(), 0.5)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await store.close()

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        """Renew this agent's lease on its nodes every ``heartbeat_s`` (the preemption service
        marks a node NotReady when its lease lapses)."""
        s = self.settings
        nodes = sorted(self.names)
        async with BusProducer(s.kafka_bootstrap_servers, client_id=f"agent-{self.ready_name}") as producer:
            while not stop.is_set():
                beat = NodeHeartbeat(agent=self.ready_name, nodes=nodes, at=time.time())
                try:
                    await producer.send_model(s.topics.heartbeats, beat, key=self.ready_name)
                except Exception:  # the broker is away: the lease may lapse, the agent goes on
                    log.warning("heartbeat not sent", exc_info=True)
                await pause(stop, s.heartbeat_s)

    async def _reconcile(self, store: EventStore) -> None:
        """Act on the jobs whose events arrived since the last call (all of them after a restore)."""
        changed = self.view.drain_changed()
        try:
            await self._act_on(store, changed)
        except BaseException:
            self.view.mark_changed(changed)  # not handled: look at them again next time
            raise

    def _run_of(self, record: JobRecord, binding: TaskBinding, started_at: float) -> TaskRun:
        return TaskRun(
            spec=record.spec,
            binding=binding,
            attempt=record.status.attempt,
            started_at=started_at,
            checkpoint_dir=self.checkpoints / record.spec.id,
            resume=record.resume,
            world_size=len(record.bindings),
            kept_s=record.kept_s,
        )

    async def _act_on(self, store: EventStore, job_ids: list[str]) -> None:
        now = time.time()
        to_start: list[tuple[JobRecord, TaskBinding]] = []
        for job_id in job_ids:
            record = self.view.jobs.get(job_id)
            held = self._mine.get(job_id)
            if record is None:  # never seen, or ended long enough ago that the view let it go
                if held is not None:
                    self._mine.pop(job_id, None)
                    self.runtime.stop(job_id)
                continue
            if held is not None and (record.state not in ACTIVE or held[0] != record.status.attempt):
                # Cancelled, ended, or its attempt is over (requeued while this agent was cut off):
                # nothing of that attempt may go on running here.
                self._mine.pop(job_id, None)
                self.runtime.stop(job_id)
            if record.state not in ACTIVE:
                continue
            if record.status.evicting:
                await self._evict(store, record, now)
                continue
            mine = self._mine.get(job_id, (0, set()))[1]
            for binding in record.bindings:
                if binding.node not in self.names or binding.task in mine or binding.task in record.done:
                    continue
                if binding.task in record.started:
                    # Started before this process: resume a simulated task, report a lost process.
                    self._own(record, binding.task)
                    if isinstance(self.runtime, SimulatedRuntime):
                        run = self._run_of(record, binding, record.started[binding.task])
                        await self.runtime.start(run, now, self._report)
                    else:
                        lost = TaskEnd(
                            job_id,
                            binding.task,
                            record.status.attempt,
                            exit_code=-1,
                            reason="the process was lost when its agent restarted",
                        )
                        await self._report(lost)
                    continue
                to_start.append((record, binding))
        for chunk_start in range(0, len(to_start), START_CHUNK):
            chunk = to_start[chunk_start : chunk_start + START_CHUNK]
            for record, binding in await self._claim(store, chunk):
                self._own(record, binding.task)
                metrics.AGENT_TASKS_STARTED.inc()
                pid = await self.runtime.start(self._run_of(record, binding, now), now, self._report)
                level = logging.INFO if pid is not None else logging.DEBUG  # simulated: thousands/s
                log.log(level, "started %s/%d on %s pid=%s", record.spec.id, binding.task, binding.node, pid)

    def _own(self, record: JobRecord, task: int) -> None:
        _, tasks = self._mine.setdefault(record.spec.id, (record.status.attempt, set()))
        tasks.add(task)

    async def _evict(self, store: EventStore, record: JobRecord, now: float) -> None:
        """Carry out ``EvictionStarted`` for this job's tasks on this agent's nodes, once each."""
        eviction = record.eviction or {}
        signal = str(eviction.get("signal", self.settings.stop_signal))
        deadline = float(eviction.get("deadline", now))
        job_id, attempt = record.spec.id, record.status.attempt
        for binding in record.bindings:
            key = (job_id, binding.task, attempt)
            if binding.node not in self.names or binding.task in record.done or key in self._stopping:
                continue
            self._stopping.add(key)
            if await self.runtime.evict(job_id, binding.task, signal, deadline):
                log.info("evicting %s/%d (%s, SIGKILL at %.1f)", job_id, binding.task, signal, deadline)
                continue
            # Not running here: never started (claim its stream stopped, so it never starts), or
            # started by a process this agent lost (it is gone: report it stopped, uncheckpointed).
            started = record.started.get(binding.task)
            end = TaskEnd(
                job_id,
                binding.task,
                attempt,
                reason="evicted before it started" if started is None else "lost with an earlier agent",
                stopped=True,
                killed=started is not None,
                ran_s=max(0.0, now - started) if started is not None else 0.0,
            )
            await self._report(end, never_started=started is None)

    async def _claim(
        self, store: EventStore, tasks: list[tuple[JobRecord, TaskBinding]]
    ) -> list[tuple[JobRecord, TaskBinding]]:
        """Record ``JobStarted`` for each task, exactly once: the task stream must not exist yet.

        One transaction for them all (a busy node set starts hundreds of tasks per second); if
        another agent instance claimed any of them first, claim them one by one to learn which.
        """

        def started(record: JobRecord, binding: TaskBinding) -> tuple[list[NewEvent], dict[str, int]]:
            job_id = record.spec.id
            attempt = record.status.attempt
            event = JobStarted(
                job_id=job_id, node=binding.node, task=binding.task, attempt=attempt, claim=self.claim_id
            )
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
            await until_available(
                functools.partial(store.append, events, expected), "claiming tasks", stop=self.stop
            )
            return tasks
        except ConcurrencyError:
            if len(tasks) == 1:
                # Another agent instance started it, or an eviction claimed it stopped; or this
                # very claim was written before the store went away and its retry conflicts.
                return tasks if await self._claimed_here(store, *tasks[0]) else []
        claimed = []
        for one in tasks:
            claimed += await self._claim(store, [one])
        return claimed

    async def _claimed_here(self, store: EventStore, record: JobRecord, binding: TaskBinding) -> bool:
        """Whether the task's stream starts with this process's claim."""
        stream = task_stream(record.spec.id, binding.task, record.status.attempt)
        first = await until_available(
            functools.partial(store.read_stream, stream), "reading a claim", stop=self.stop
        )
        return bool(first) and first[0].type == "JobStarted" and first[0].data.get("claim") == self.claim_id

    def _end_event(self, end: TaskEnd, node: str) -> TaskStopped | JobFinished | JobFailed:
        if end.stopped:
            return TaskStopped(
                job_id=end.job_id,
                node=node,
                task=end.task,
                attempt=end.attempt,
                checkpointed=end.checkpointed,
                exit_code=end.exit_code,
                killed=end.killed,
                ran_s=round(end.ran_s, 3),
            )
        if end.exit_code is None:
            return JobFinished(job_id=end.job_id, node=node, task=end.task, attempt=end.attempt)
        return JobFailed(
            job_id=end.job_id,
            node=node,
            task=end.task,
            attempt=end.attempt,
            exit_code=end.exit_code,
            reason=end.reason,
        )

    async def _report(self, end: TaskEnd, never_started: bool = False) -> None:
        """Append a task's end exactly once (its task stream at version 1, or none for a task
        evicted before it started), retrying until the store takes it: the end waits in the
        outbox meanwhile, so a restart reports it too."""
        assert self.store is not None
        store = self.store
        record = self.view.jobs.get(end.job_id)
        if record is None or record.state in TERMINAL or record.status.attempt != end.attempt:
            self.outbox.remove(end)
            return  # the job or this attempt is over already: nothing to report
        node = next((b.node for b in record.bindings if b.task == end.task), "")
        event = self._end_event(end, node)
        data = event.model_dump(mode="json")
        # Not on the node's stream: a release only adds room, so it must not move the node's
        # version and fail a placement planned before it (the fold frees from the job's stream).
        task = task_stream(end.job_id, end.task, end.attempt)
        events = [NewEvent(job_stream(end.job_id), event.type, data), NewEvent(task, event.type, data)]
        expected = {job_stream(end.job_id): ANY_VERSION, task: NO_STREAM if never_started else 1}
        self.outbox.put(end)
        # A conflict: already ended by another instance (or started by one, for a claim-stop).
        try:
            await until_available(
                functools.partial(store.append, events, expected),
                f"reporting {end.job_id}/{end.task}",
                stop=self.stop,
            )
            metrics.AGENT_TASK_ENDS.labels(event.type).inc()
        except ConcurrencyError:
            pass
        except OSError:
            if self.stop is None or not self.stop.is_set():
                raise
            log.warning("stopping with %s/%d unreported: it stays in the outbox", end.job_id, end.task)
            return  # the next agent on this state folder reports it first thing
        self.outbox.remove(end)


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
