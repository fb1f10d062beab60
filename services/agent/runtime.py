"""How an agent runs a bound task: two runtimes behind one interface.

* :class:`SimulatedRuntime` finishes a task after its ``duration-s`` divided by ``speedup`` (one
  process can stand in for many nodes in load tests);
* :class:`ProcessRuntime` starts the job's command as a real subprocess with
  ``CUDA_VISIBLE_DEVICES`` set to its GPU slots and pinned to dedicated CPU cores
  (``os.sched_setaffinity`` in the child), and reports its exit code.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from schemas.events import TaskBinding
from schemas.job import JobSpec

Done = Callable[[str, int, int | None, str], Awaitable[None]]  # job, task, exit code (None = ok), reason


class Runtime(Protocol):
    async def start(
        self, spec: JobSpec, binding: TaskBinding, started_at: float, now: float, done: Done
    ) -> int | None:
        """Start (or resume) a task; returns a pid when there is a real process."""
        ...

    def stop(self, job_id: str) -> None:
        """Stop a job's tasks (cancellation)."""
        ...


@dataclass
class SimulatedRuntime:
    speedup: float = 1.0
    default_duration_s: float = 1.0
    _timers: dict[tuple[str, int], asyncio.Task[None]] = field(default_factory=dict)

    async def start(
        self, spec: JobSpec, binding: TaskBinding, started_at: float, now: float, done: Done
    ) -> int | None:
        duration = (spec.duration_s or self.default_duration_s) / self.speedup
        remaining = max(0.0, started_at + duration - now)  # resumes where a restarted agent left off

        async def finish() -> None:
            await asyncio.sleep(remaining)
            self._timers.pop((spec.id, binding.task), None)
            await done(spec.id, binding.task, None, "")

        self._timers[(spec.id, binding.task)] = asyncio.create_task(finish())
        return None

    def stop(self, job_id: str) -> None:
        for key in [k for k in self._timers if k[0] == job_id]:
            self._timers.pop(key).cancel()


@dataclass
class ProcessRuntime:
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    _busy: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    _procs: dict[tuple[str, int], asyncio.subprocess.Process] = field(default_factory=dict)
    _waiters: set[asyncio.Task[None]] = field(default_factory=set)

    def free_cpus(self) -> list[int]:
        used = {c for cs in self._busy.values() for c in cs}
        return [c for c in self.cpus if c not in used]

    async def start(
        self, spec: JobSpec, binding: TaskBinding, started_at: float, now: float, done: Done
    ) -> int | None:
        want = max(1, math.ceil(binding.cpu_milli / 1000))
        free = self.free_cpus()
        cpuset = free[:want] if len(free) >= want else free[:1] or self.cpus[:1]
        env = {**os.environ, **spec.env, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in binding.gpus)}
        env["TESSERA_JOB_ID"], env["TESSERA_TASK"] = spec.id, str(binding.task)
        env["TESSERA_CPUSET"] = ",".join(str(c) for c in cpuset)

        def pin() -> None:  # runs in the child between fork and exec
            os.sched_setaffinity(0, cpuset)
            os.setsid()

        proc = await asyncio.create_subprocess_exec(*spec.command, env=env, preexec_fn=pin)
        key = (spec.id, binding.task)
        self._busy[key], self._procs[key] = cpuset, proc

        async def wait() -> None:
            code = await proc.wait()
            self._busy.pop(key, None)
            self._procs.pop(key, None)
            await done(
                spec.id, binding.task, code if code != 0 else None, "" if code == 0 else f"exit code {code}"
            )

        waiter = asyncio.create_task(wait())
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        return proc.pid

    def stop(self, job_id: str) -> None:
        for key, proc in list(self._procs.items()):
            if key[0] == job_id and proc.returncode is None:
                os.killpg(proc.pid, signal.SIGTERM)
