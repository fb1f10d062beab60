"""A whole Tessera stack as child processes, on its own database and topic prefix.

Used by the end-to-end tests and ``bench_pipeline.py``: every service is a separate process, as in
production, started in order and awaited until its readiness marker appears.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Collection
from pathlib import Path
from typing import Any

from schemas import JobSpec
from shared.bus.topics import delete_topics
from shared.cli import stack
from shared.core.lifecycle import TASK_ENDS
from shared.eventstore.port import RecordedEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.settings import Settings
from shared.sim.trace import load_pods

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "loadtests" / "traces" / "alibaba-gpu-v2023"


def trace_specs(count: int, speedup: float, tag: str, longest_s: float | None = None) -> list[JobSpec]:
    """The first ``count`` openb pods by creation time as job specs, run times divided by
    ``speedup``, ids suffixed with ``tag`` (a run's jobs never collide with another's).

    ``longest_s`` caps the run times so divided.  A test waits for its last job: at the agent's
    500x the longest of the first 300 pods runs 50 s, and 23 of them run over 10 s."""
    pods = sorted(load_pods(TRACES / "openb_pod_list_default.csv"), key=lambda p: (p.creation_time, p.name))
    specs = []
    for p in pods[:count]:
        spec = stack.spec_from_trace(p, speedup).model_copy(update={"id": f"{p.name}-{tag}"})
        if longest_s is not None and spec.duration_s is not None:
            spec = spec.model_copy(update={"duration_s": min(spec.duration_s, longest_s)})
        specs.append(spec)
    return specs


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveStack:
    def __init__(self, kafka: str, database: str, prefix: str, folder: Path) -> None:
        self.folder = folder
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": kafka,
            "DATABASE_URL": database,
            "TESSERA_TOPIC_PREFIX": prefix,
            "TESSERA_STATS_DIR": str(folder),
            "TESSERA_LOG_LEVEL": "INFO",
            "TESSERA_CHECKPOINT_ROOT": str(folder / "checkpoints"),
            "TESSERA_AGENT_STATE_DIR": str(folder / "agent-state"),
        }
        self.settings = Settings(KAFKA_BOOTSTRAP_SERVERS=kafka, DATABASE_URL=database, topic_prefix=prefix)
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.commands: dict[str, tuple[tuple[str, ...], str | None]] = {}  # name -> (argv, ready)
        self.metrics: dict[str, int] = {}  # service -> its Prometheus port (``metrics=True``)

    async def start(self, name: str, *argv: str, ready: str | None = None) -> None:
        self.commands[name] = (argv, ready)
        marker = self.folder / f"{ready or name}.ready"
        marker.unlink(missing_ok=True)
        log = (self.folder / f"{name}.log").open("ab")
        env = {**self.env, "TESSERA_SERVICE_NAME": ready or name}
        if name in self.metrics:
            env["TESSERA_METRICS_PORT"] = str(self.metrics[name])
        self.procs[name] = await asyncio.create_subprocess_exec(
            sys.executable, *argv, cwd=ROOT, env=env, stdout=log, stderr=log
        )
        deadline = time.time() + 60
        while not marker.exists():
            assert self.procs[name].returncode is None, (self.folder / f"{name}.log").read_text()[-3000:]
            assert time.time() < deadline, f"{name} not ready"
            await asyncio.sleep(0.1)

    async def standard(self, workers: int, agent: list[str], metrics: bool = False) -> None:
        """Every service; with ``metrics``, each serves Prometheus metrics on a free port
        (``self.metrics``, read with :meth:`scrape`)."""
        if metrics:
            names = ["relay", "admission", "preemption", "agent"]
            names += [f"placement-{i}" for i in range(1, workers + 1)]
            self.metrics = {name: free_port() for name in names}
        await self.start("relay", "-m", "shared.eventstore.relay")
        await self.start("admission", "-m", "services.admission.app")
        await self.start("preemption", "-m", "services.preemption.app")
        await self.start("agent", "-m", "services.agent.app", *agent)
        for i in range(1, workers + 1):
            await self.start(
                f"placement-{i}",
                "-m",
                "services.placement.app",
                "--name",
                f"w{i}",
                "--shard",
                f"{i - 1}/{workers}",
                ready=f"placement-w{i}",
            )

    async def restart(self, name: str) -> None:
        """Start ``name`` again as it was started last (after :meth:`kill`, say)."""
        argv, ready = self.commands[name]
        await self.start(name, *argv, ready=ready)

    def scrape(self, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The metric samples service ``name`` serves now: (name, labels) -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics[name]}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def pids(self) -> dict[str, int]:
        """Process ids of the running services, by name."""
        return {name: p.pid for name, p in self.procs.items() if p.returncode is None}

    async def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()

    async def delete_topics(self) -> list[str]:
        """Delete this stack's topics (call after :meth:`stop`); their names."""
        return await delete_topics(self.settings.kafka_bootstrap_servers, self.settings.topics)

    async def wait_terminal(self, job_ids: list[str], timeout: float) -> dict[str, str]:
        return await stack.wait_for(job_ids, timeout, self.settings)

    def stats(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.folder.glob("placement-*.json"))]


async def log_of(database: str) -> list[RecordedEvent]:
    """The whole event log of ``database``."""
    store = await PostgresEventStore.connect(database, max_size=2)
    try:
        return await store.read_all(0, 10**7)
    finally:
        await store.close()


def delivery_faults(
    events: list[RecordedEvent],
    jobs: list[str],
    may_be_unplaced: Collection[str] = (),
    per_attempt: bool = False,
) -> dict[str, int]:
    """What breaks "exactly once" in a log, counted: jobs admitted or placed other than once
    (``may_be_unplaced``: jobs cancelled, which may end before any placement; ``per_attempt``:
    where jobs are evicted and placed again, placed never or more than once in one attempt),
    tasks started or ended more than once (finished, failed, or stopped by an eviction or a cancel), tasks
    started but never ended or ended but never started (0 everywhere in a sound run; a job
    requeued after its node was lost is placed again, legitimately; a task evicted before it
    started ends unstarted); and, for scale, how many tasks started."""
    admitted = collections.Counter(e.stream for e in events if e.type == "JobAdmitted")
    placements = [e for e in events if e.type == "JobPlaced" and e.stream.startswith("job-")]
    placed = collections.Counter(e.stream for e in placements)
    if per_attempt:  # a job counts as placed once unless one of its attempts was placed twice
        attempts = collections.Counter((e.stream, e.data.get("attempt", 0)) for e in placements)
        twice = {stream for (stream, _), n in attempts.items() if n > 1}
        placed = collections.Counter({s: 2 if s in twice else 1 for s in placed})
    started = collections.Counter(
        e.stream for e in events if e.type == "JobStarted" and e.stream.startswith("task-")
    )
    ended = collections.Counter(
        e.stream for e in events if e.type in TASK_ENDS and e.stream.startswith("task-")
    )
    unplaced_ok = set(may_be_unplaced)
    return {
        "admitted_not_once": sum(admitted[f"job-{j}"] != 1 for j in jobs),
        "placed_not_once": sum(
            placed[f"job-{j}"] != 1 and not (j in unplaced_ok and placed[f"job-{j}"] == 0) for j in jobs
        ),
        "tasks_started_twice": sum(n > 1 for n in started.values()),
        "tasks_ended_twice": sum(n > 1 for n in ended.values()),
        "tasks_never_ended": len(set(started) - set(ended)),
        "tasks_ended_unstarted": len(set(ended) - set(started)),
        "tasks_started": len(started),
    }
