"""How an agent runs a bound task: two runtimes behind one interface.

* :class:`SimulatedRuntime` finishes a task after its ``duration-s`` divided by ``speedup`` (one
  process can stand in for many nodes in load tests); an evicted checkpointable task keeps what
  it ran (its next attempt runs only the rest), any other starts over;
* :class:`ProcessRuntime` starts the job's command as a real subprocess with
  ``CUDA_VISIBLE_DEVICES`` set to its GPU slots and pinned to dedicated CPU cores
  (``os.sched_setaffinity`` in the child), and reports its exit code.

Eviction follows Slurm's GraceTime: the task's process group gets the stop signal (SIGTERM by
default), and SIGKILL at the deadline if it is still there.  It counts as *checkpointed* when it
exited by itself before the deadline and wrote a file under ``TESSERA_CHECKPOINT_DIR`` after the
signal.  The environment a task sees:

=========================  ======================================================================
TESSERA_JOB_ID, _TASK      the job and this replica's index (0-based)
TESSERA_ATTEMPT            0 for the first run, N after N preemptions or requeues
TESSERA_RESUME             1 when an earlier attempt left a checkpoint to resume from, else 0
TESSERA_CHECKPOINT_DIR     the job's own folder, the same for every attempt: write checkpoints
                           there on SIGTERM (and periodically), read them when TESSERA_RESUME=1
TESSERA_WORLD_SIZE         how many replicas this attempt runs
TESSERA_CPUSET             the CPU cores the task is pinned to
CUDA_VISIBLE_DEVICES       the GPU slots bound to it
=========================  ======================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import signal as signals
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from schemas.events import TaskBinding
from schemas.job import JobSpec

PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class TaskRun:
    """One task of one attempt, with what its process needs to know."""

    spec: JobSpec
    binding: TaskBinding
    attempt: int
    started_at: float  # epoch seconds (a resumed simulated task continues from here)
    checkpoint_dir: Path
    resume: bool = False
    world_size: int = 1
    kept_s: float = 0.0  # run time earlier attempts kept in checkpoints

    @property
    def key(self) -> tuple[str, int]:
        return (self.spec.id, self.binding.task)

    def env(self) -> dict[str, str]:
        return {
            "TESSERA_JOB_ID": self.spec.id,
            "TESSERA_TASK": str(self.binding.task),
            "TESSERA_ATTEMPT": str(self.attempt),
            "TESSERA_RESUME": "1" if self.resume else "0",
            "TESSERA_CHECKPOINT_DIR": str(self.checkpoint_dir),
            "TESSERA_WORLD_SIZE": str(self.world_size),
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.binding.gpus),
        }


@dataclass(frozen=True)
class TaskEnd:
    """How a task's attempt ended.  ``stopped``: by an eviction (then ``checkpointed``, ``killed``)."""

    job_id: str
    task: int
    attempt: int
    exit_code: int | None = None  # None: success, or not known
    reason: str = ""
    stopped: bool = False
    checkpointed: bool = False
    killed: bool = False
    ran_s: float = 0.0


Done = Callable[[TaskEnd], Coroutine[Any, Any, None]]


class Runtime(Protocol):
    async def start(self, run: TaskRun, now: float, done: Done) -> int | None:
        """Start (or resume) a task; returns a pid when there is a real process."""
        ...

    async def evict(self, job_id: str, task: int, signal: str, deadline: float) -> bool:
        """Stop a task with the checkpoint protocol; ``done`` hears of it with ``stopped``.
        False when the task does not run here.  A second call for the same task does nothing."""
        ...

    def stop(self, job_id: str) -> None:
        """Stop a job's tasks without a report (cancelled, or its attempt is over)."""
        ...

    def running(self) -> int:
        """Tasks that run here now (one being evicted counts until its process has exited)."""
        ...


@dataclass
class SimulatedRuntime:
    speedup: float = 1.0
    default_duration_s: float = 1.0
    _timers: dict[tuple[str, int], asyncio.Task[None]] = field(default_factory=dict)
    _runs: dict[tuple[str, int], TaskRun] = field(default_factory=dict)
    _done: dict[tuple[str, int], Done] = field(default_factory=dict)
    _reports: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, run: TaskRun, now: float, done: Done) -> int | None:
        duration = (run.spec.duration_s or self.default_duration_s) / self.speedup
        # A restarted agent resumes where it left off; a checkpointed attempt skips what it kept.
        remaining = max(0.0, run.started_at + duration - run.kept_s - now)
        key = run.key

        async def finish() -> None:
            await asyncio.sleep(remaining)
            self._forget(key)
            await done(
                TaskEnd(run.spec.id, run.binding.task, run.attempt, ran_s=time.time() - run.started_at)
            )

        self._timers[key], self._runs[key], self._done[key] = asyncio.create_task(finish()), run, done
        return None

    def _forget(self, key: tuple[str, int]) -> None:
        self._timers.pop(key, None)
        self._runs.pop(key, None)
        self._done.pop(key, None)

    async def evict(self, job_id: str, task: int, signal: str, deadline: float) -> bool:
        key = (job_id, task)
        timer, run, done = self._timers.get(key), self._runs.get(key), self._done.get(key)
        if timer is None or run is None or done is None:
            return False
        timer.cancel()
        self._forget(key)
        # A simulated checkpoint takes no time: a checkpointable task saves and exits at once.
        end = TaskEnd(
            job_id,
            task,
            run.attempt,
            stopped=True,
            checkpointed=run.spec.checkpointable,
            ran_s=max(0.0, time.time() - run.started_at),
        )
        report = asyncio.create_task(done(end))
        self._reports.add(report)
        report.add_done_callback(self._reports.discard)
        return True

    def stop(self, job_id: str) -> None:
        for key in [k for k in self._timers if k[0] == job_id]:
            self._timers[key].cancel()
            self._forget(key)

    def running(self) -> int:
        return len(self._timers)


def _die_with_parent() -> None:
    """In the child: SIGKILL when the agent dies, so a task never outlives the agent that
    reports it (a restarted agent reports the lost ones; none runs unwatched, twice)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signals.SIGKILL)


def _wrote_since(folder: Path, since: float) -> bool:
    try:
        return any(p.is_file() and p.stat().st_mtime >= since - 0.01 for p in folder.rglob("*"))
    except OSError:
        return False


@dataclass
class _Eviction:
    signalled_at: float
    killer: asyncio.Task[None]
    killed: bool = False


@dataclass
class ProcessRuntime:
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    stop_grace_s: float = 10.0  # cancellation: SIGTERM, then SIGKILL after this
    _busy: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    _procs: dict[tuple[str, int], asyncio.subprocess.Process] = field(default_factory=dict)
    _runs: dict[tuple[str, int], TaskRun] = field(default_factory=dict)
    _evictions: dict[tuple[str, int], _Eviction] = field(default_factory=dict)
    _waiters: set[asyncio.Task[None]] = field(default_factory=set)

    def free_cpus(self) -> list[int]:
        used = {c for cs in self._busy.values() for c in cs}
        return [c for c in self.cpus if c not in used]

    def running(self) -> int:
        return len(self._procs)  # an entry leaves when its process has exited

    async def start(self, run: TaskRun, now: float, done: Done) -> int | None:
        spec, binding = run.spec, run.binding
        want = max(1, math.ceil(binding.cpu_milli / 1000))
        free = self.free_cpus()
        cpuset = free[:want] if len(free) >= want else free[:1] or self.cpus[:1]
        run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env, **run.env(), "TESSERA_CPUSET": ",".join(str(c) for c in cpuset)}

        def pin() -> None:  # runs in the child between fork and exec
            os.sched_setaffinity(0, cpuset)
            os.setsid()
            _die_with_parent()

        proc = await asyncio.create_subprocess_exec(*spec.command, env=env, preexec_fn=pin)
        key = run.key
        self._busy[key], self._procs[key], self._runs[key] = cpuset, proc, run
        began = time.time()

        async def wait() -> None:
            code = await proc.wait()
            self._busy.pop(key, None)
            self._procs.pop(key, None)
            self._runs.pop(key, None)
            eviction = self._evictions.pop(key, None)
            ran = time.time() - began
            if eviction is not None:
                eviction.killer.cancel()
                checkpointed = not eviction.killed and _wrote_since(run.checkpoint_dir, eviction.signalled_at)
                end = TaskEnd(
                    spec.id,
                    binding.task,
                    run.attempt,
                    exit_code=code,
                    reason="killed at the deadline" if eviction.killed else f"exited with {code} when asked",
                    stopped=True,
                    checkpointed=checkpointed,
                    killed=eviction.killed,
                    ran_s=ran,
                )
            else:
                end = TaskEnd(
                    spec.id,
                    binding.task,
                    run.attempt,
                    exit_code=code if code != 0 else None,
                    reason="" if code == 0 else f"exit code {code}",
                    ran_s=ran,
                )
            await done(end)

        waiter = asyncio.create_task(wait())
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        return proc.pid

    async def evict(self, job_id: str, task: int, signal: str, deadline: float) -> bool:
        key = (job_id, task)
        proc = self._procs.get(key)
        if proc is None or proc.returncode is not None:
            return False
        if key in self._evictions:
            return True  # already asked: never signalled twice for one eviction
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, getattr(signals, signal, signals.SIGTERM))

        async def kill_at_deadline() -> None:
            await asyncio.sleep(max(0.0, deadline - time.time()))
            if proc.returncode is None:
                self._evictions[key].killed = True
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signals.SIGKILL)

        self._evictions[key] = _Eviction(time.time(), asyncio.create_task(kill_at_deadline()))
        return True

    def stop(self, job_id: str) -> None:
        """SIGTERM to each task's process group, SIGKILL after ``stop_grace_s`` (no report wanted:
        the job was cancelled or its attempt is over)."""
        for key, proc in list(self._procs.items()):
            if key[0] != job_id or proc.returncode is not None:
                continue
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signals.SIGTERM)

            async def kill_later(p: asyncio.subprocess.Process = proc) -> None:
                await asyncio.sleep(self.stop_grace_s)
                if p.returncode is None:
                    with contextlib.suppress(OSError):
                        os.killpg(p.pid, signals.SIGKILL)

            killer = asyncio.create_task(kill_later())
            self._waiters.add(killer)
            killer.add_done_callback(self._waiters.discard)
