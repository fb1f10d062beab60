"""The timeline protocol: jobs arrive, wait, run, get preempted, resume and end, in simulated time.

The simulator keeps no queue and no fit checks of its own: at every moment something happens
it builds a :class:`~shared.core.cycle.Snapshot` (nodes with what runs on them, the queue
tree, pending and running jobs, reservations) and runs the same ``run_cycle`` the placement
workers run, then carries out the intents:

* ``Place``: the job starts; it ends after its remaining work at its speed (elastic jobs run
  faster or slower with more or fewer tasks, by the trace's throughput table);
* ``Preempt``: the victim keeps running through its grace, then stops; a checkpointable victim
  keeps its progress and pays ``restart_overhead_s``, any other starts over; it is pending again
  with one more attempt;
* ``Resize``: an elastic job changes size at once (it restarts from a checkpoint, paying the
  restart overhead);
* ``Reserve``/``Release``: kept and handed to the next cycle, as the event log does live.

Events at one moment are applied together (ends first), then one cycle runs.  A cycle also
runs at its ``wake_at`` (a reservation's timeout, a victim's minimum run time ending), so
time-based rules act without any other event.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from shared.core.cluster import ClusterState, Placement
from shared.core.cycle import CycleConfig, Place, Preempt, Resize, Snapshot, run_cycle
from shared.core.framework import Status
from shared.core.jobs import Job, Reservation, Running, RuntimeEstimator
from shared.core.memo import CycleMemo, PendingDelta
from shared.core.task import TaskShape
from shared.sim.wait_causes import CAUSES, LARGE_GPUS, wait_cause
from shared.sim.workload import SimJob, Workload

FloatArray = npt.NDArray[np.float64]
ARRIVE, END, EVICT, WAKE = 1, 0, 2, 3
JAIN_EVERY_S = 1800.0  # fairness is sampled this often (simulated seconds)


@dataclass
class JobRun:
    """Everything the simulator tracks about one job."""

    spec: SimJob
    job: Job  # the cycle's view, rebuilt when it changes
    remaining: float  # work left, in seconds at full size
    placements: list[Placement] = field(default_factory=list)
    started: float = -1.0
    progress_at: float = 0.0  # when ``remaining`` was last brought up to date
    token: int = 0  # bumps on every change of the run, so stale end events are ignored
    first_start: float = -1.0
    waited: float = 0.0  # total time pending (every attempt)
    pending_since: float = 0.0
    finished: float = -1.0
    preemptions: int = 0
    evicting: bool = False
    lost_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    attained_gpu_s: float = 0.0

    @property
    def gpus_now(self) -> float:
        return sum(p.task.total_gpu_milli for p in self.placements) / 1000.0


@dataclass
class TimelineResult:
    policy: str
    seed: int
    total_gpus: int
    times: FloatArray  # moments of change (s)
    alloc: FloatArray  # GPUs allocated after each (% of the cluster)
    queue: npt.NDArray[np.int64]  # pending jobs after each
    jobs: list[JobRun]
    jain_times: FloatArray
    jain: FloatArray  # Jain's index over queues with demand, at each sample
    first_arrival: float
    last_arrival: float
    window_start: float  # utilisation is measured from here to the last arrival
    cycles: int
    wall_s: float
    preemptions: int
    offered_load: float
    queue_shares: dict[str, QueueShare] = field(default_factory=dict)
    """Per queue of the tree, its x (GPUs held / GPUs deserved) over the samples of the index."""
    jain_whole_jobs: FloatArray = field(default_factory=lambda: np.zeros(0))
    """The index at each sample over the queues whose deserved share holds their smallest job
    (a queue deserving less than one of its jobs is at 0 or far above 1, whatever the policy)."""
    large_wait_causes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    """Waiting large jobs counted per cause over the samples of the index (``wait_causes.py``)."""


@dataclass
class QueueShare:
    """One queue's x = GPUs held / GPUs deserved, summed over the samples where it had demand."""

    samples: int = 0
    total: float = 0.0
    below: int = 0  # samples with x below ``UNDER``
    sub_job: int = 0  # samples where its deserved share was less than its smallest job

    def add(self, x: float, sub_job: bool) -> None:
        self.samples += 1
        self.total += x
        self.below += x < UNDER
        self.sub_job += sub_job


UNDER = 0.9
"""A queue holding less than this share of what it deserves counts as under-served."""


def jain(x: FloatArray) -> float:
    """Jain's index of the shares ``x``: 1 when all are equal, 1/n when one holds everything."""
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


@dataclass
class _Sim:
    workload: Workload
    config: CycleConfig
    seed: int
    cluster: ClusterState
    rng: np.random.Generator
    runs: dict[str, JobRun]
    estimator: RuntimeEstimator = field(default_factory=RuntimeEstimator)
    events: list[tuple[float, int, int, str, int]] = field(default_factory=list)
    seq: int = 0
    pending: dict[str, Job] = field(default_factory=dict)  # in the order they became pending
    running: dict[str, None] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)
    used_milli: int = 0
    next_wake: float = float("inf")
    # Curves.
    times: list[float] = field(default_factory=list)
    alloc: list[float] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)
    jain_t: list[float] = field(default_factory=list)
    jain_v: list[float] = field(default_factory=list)
    last_jain: float = -1e18
    jain_whole: list[float] = field(default_factory=list)
    shares: dict[str, QueueShare] = field(default_factory=dict)
    waiting: dict[str, Status] = field(default_factory=dict)  # the last cycle's reasons
    wait_causes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    cycles: int = 0
    preemptions: int = 0
    # Each running job's snapshot entry, kept while it is the same run (token), evicting or not,
    # of the same Job and attained service: most of them carry over from cycle to cycle.
    kept: dict[str, tuple[int, bool, Job, float, Running]] = field(default_factory=dict)
    # What the cycle's memo follows: how the pending jobs changed since the last snapshot.
    memo: CycleMemo = field(default_factory=CycleMemo)
    generation: int = 0
    left: set[str] = field(default_factory=set)
    came: dict[str, Job] = field(default_factory=dict)

    def push(self, t: float, kind: int, job: str, token: int = 0) -> None:
        heapq.heappush(self.events, (t, kind, self.seq, job, token))
        self.seq += 1

    # -- applying events ---------------------------------------------------------------------
    def arrive(self, run: JobRun, now: float) -> None:
        run.pending_since = now
        self.pending[run.spec.id] = run.job
        self.came[run.spec.id] = run.job

    def advance(self, run: JobRun, now: float) -> None:
        """Bring a running job's remaining work and counters up to ``now``."""
        dt = now - run.progress_at
        if dt > 0 and run.placements:
            run.remaining -= dt * run.spec.rate(len(run.placements))
            gpu_s = dt * run.gpus_now
            run.used_gpu_s += gpu_s
            run.attained_gpu_s += gpu_s
        run.progress_at = now

    def schedule_end(self, run: JobRun, now: float) -> None:
        run.token += 1
        rate = run.spec.rate(len(run.placements))
        self.push(now + max(0.0, run.remaining) / rate, END, run.spec.id, run.token)

    def release(self, run: JobRun) -> None:
        for p in run.placements:
            self.cluster.remove(p)
            self.used_milli -= p.task.total_gpu_milli
        run.placements = []

    def end(self, run: JobRun, now: float) -> None:
        self.advance(run, now)
        self.release(run)
        run.finished = now
        self.running.pop(run.spec.id, None)
        self.estimator.observe(run.job, now - run.started)
        run.token += 1

    def evict(self, run: JobRun, now: float) -> None:
        self.advance(run, now)
        gpus = run.gpus_now
        self.release(run)
        self.running.pop(run.spec.id, None)
        cfg = self.config
        if run.spec.checkpointable:
            lost = cfg.restart_overhead_s * gpus
            run.remaining += cfg.restart_overhead_s
        else:
            lost = max(0.0, now - run.started) * gpus
            run.remaining = run.spec.work_s
        run.lost_gpu_s += lost
        run.preemptions += 1
        run.evicting = False
        run.token += 1
        run.job = replace(
            run.job,
            queued_since=now,
            attempt=run.job.attempt + 1,
            preemptions=run.preemptions,
            attained_gpu_s=run.attained_gpu_s,
        )
        self.arrive(run, now)

    # -- the cycle ---------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        pending = list(self.pending.values())
        self.generation += 1
        left, came = frozenset(self.left), tuple(self.came.values())
        delta = PendingDelta(self.generation, self.generation - 1, left, came)
        self.left, self.came = set(), {}
        preemptive = self.config.order.preemptive
        kept = self.kept
        running = []
        for j in self.running:
            r = self.runs[j]
            attained = r.attained_gpu_s if preemptive else 0.0
            found = kept.get(j)
            if (
                found is not None
                and found[0] == r.token
                and found[1] == r.evicting
                and found[2] is r.job
                and found[3] == attained
            ):
                running.append(found[4])
                continue
            entry = Running(
                replace(r.job, attained_gpu_s=attained) if preemptive else r.job,
                tuple(r.placements),
                r.started,
                preempting=r.evicting,
                leaving=len(r.placements) if r.evicting else 0,
            )
            kept[j] = (r.token, r.evicting, r.job, attained, entry)
            running.append(entry)
        if len(kept) > 2 * len(self.running) + 1024:
            self.kept = {j: kept[j] for j in self.running if j in kept}
        return Snapshot(
            cluster=self.cluster,
            pending=pending,
            running=running,
            queues=self.workload.queues,
            reservations=self.reservations,
            backoff=self.backoff,
            estimator=self.estimator,
            memo=self.memo,
            pending_delta=delta,
        )

    def cycle(self, now: float) -> None:
        if not self.pending and not self.config.elastic:
            return
        self.cycles += 1
        result = run_cycle(self.snapshot(), self.config, now, self.rng)
        self.reservations = result.reservations
        self.waiting = result.unschedulable
        self.backoff = result.backoff
        for intent in result.intents:
            if isinstance(intent, Place):
                self.start(self.runs[intent.job], list(intent.placements), now)
            elif isinstance(intent, Preempt):
                victim = self.runs[intent.victim]
                if victim.placements and not victim.evicting:
                    victim.evicting = True
                    self.preemptions += 1
                    self.push(now + intent.grace_s, EVICT, victim.spec.id, victim.token)
            elif isinstance(intent, Resize):
                self.resize(self.runs[intent.job], intent, now)
        if result.wake_at < self.next_wake:
            self.next_wake = result.wake_at
            self.push(result.wake_at, WAKE, "")

    def start(self, run: JobRun, placements: list[Placement], now: float) -> None:
        for p in placements:
            self.cluster.place(p.node, p.task, p.gpus)
            self.used_milli += p.task.total_gpu_milli
        run.placements = placements
        run.started = now
        run.progress_at = now
        run.waited += now - run.pending_since
        if run.first_start < 0:
            run.first_start = now
        # A job that came since the last snapshot just does not come; any other leaves.
        if self.pending.pop(run.spec.id, None) is not None and self.came.pop(run.spec.id, None) is None:
            self.left.add(run.spec.id)
        self.running[run.spec.id] = None
        self.schedule_end(run, now)

    def resize(self, run: JobRun, intent: Resize, now: float) -> None:
        if not run.placements:
            return
        self.advance(run, now)
        for task in sorted(intent.removed, reverse=True):
            if task < len(run.placements):
                p = run.placements.pop(task)
                self.cluster.remove(p)
                self.used_milli -= p.task.total_gpu_milli
        for p in intent.added:
            self.cluster.place(p.node, p.task, p.gpus)
            self.used_milli += p.task.total_gpu_milli
            run.placements.append(p)
        # The job restarts at its new size from a checkpoint: it pays the restart overhead.
        overhead = self.config.restart_overhead_s
        run.remaining += overhead
        run.lost_gpu_s += overhead * run.gpus_now
        self.schedule_end(run, now)

    # -- recording ---------------------------------------------------------------------------
    def record(self, now: float, total_milli: int) -> None:
        self.times.append(now)
        self.alloc.append(100.0 * self.used_milli / total_milli)
        self.queue.append(len(self.pending))
        if now - self.last_jain >= JAIN_EVERY_S:
            self.last_jain = now
            value = self.jain_now(total_milli)
            if value is not None:
                self.jain_t.append(now)
                self.jain_v.append(value)

    def count_wait_causes(self, share: dict[str, float]) -> None:
        """One sample of why each waiting large job waits (``wait_causes.py``)."""
        for job in self.pending.values():
            if self.runs[job.id].spec.gpus >= LARGE_GPUS:
                x = share.get(job.queue, 0.0)
                self.wait_causes[wait_cause(job.id in self.reservations, x, self.waiting.get(job.id))] += 1

    def jain_now(self, total_milli: int) -> float | None:
        """Jain's index over queues with demand of (GPU share received / GPU share deserved)."""
        from shared.core.queues import vector

        tree = self.workload.queues
        held: dict[str, float] = {}
        wanted: dict[str, float] = {}  # milli-GPU held or asked for (the fewest replicas)
        smallest: dict[str, float] = {}  # milli-GPU of its smallest job held or asked for
        for j in self.running:
            r = self.runs[j]
            q, milli = r.job.queue, sum(p.task.total_gpu_milli for p in r.placements)
            held[q] = held.get(q, 0.0) + milli
            wanted[q] = wanted.get(q, 0.0) + milli
            smallest[q] = min(smallest.get(q, milli), milli)
        for job in self.pending.values():
            milli = job.shape.total_gpu_milli * job.fewest
            wanted[job.queue] = wanted.get(job.queue, 0.0) + milli
            smallest[job.queue] = min(smallest.get(job.queue, milli), milli)
        active = [q for q, w in wanted.items() if q in tree and w > 0]
        if not active:
            return None
        # Only GPUs are shared out here (the capacity has no CPU or memory), and the tree's
        # water-filling treats each dimension apart: the GPU demand alone gives the same split.
        demand = {q: vector(gpu=w) for q, w in wanted.items()}
        deserved = tree.deserved(np.array([float(total_milli), 0.0, 0.0]), demand)
        x = np.array([held.get(q, 0.0) / max(1e-9, float(deserved[q][0])) for q in active])
        self.count_wait_causes(dict(zip(active, x.tolist(), strict=True)))
        if len(active) < 2:
            return None
        if not (x > 0).any():
            return None
        whole = np.array([float(deserved[q][0]) >= smallest[q] for q in active])
        for q, xq, w in zip(active, x.tolist(), whole.tolist(), strict=True):
            self.shares.setdefault(q, QueueShare()).add(xq, not w)
        if whole.sum() >= 2 and (x[whole] > 0).any():
            self.jain_whole.append(jain(x[whole]))
        return jain(x)


def run_timeline(
    workload: Workload,
    policy: str,
    config: CycleConfig,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> TimelineResult:
    """Replay ``workload`` under ``config`` until every job has ended."""
    node_rng = np.random.default_rng([seed, 1])
    order = node_rng.permutation(len(workload.nodes))
    cluster = ClusterState([workload.nodes[i] for i in order])
    runs: dict[str, JobRun] = {}
    # Equal shapes as one object: the cycle keys its per-shape memos by shape, and a lookup
    # that finds the very object skips comparing fields (millions of times on a long trace).
    shapes: dict[TaskShape, TaskShape] = {}
    for spec in workload.jobs:
        job = Job(
            id=spec.id,
            queue=spec.queue,
            tenant=spec.tenant,
            shape=shapes.setdefault(spec.shape, spec.shape),
            replicas=spec.replicas,
            min_replicas=spec.min_replicas,
            priority=spec.priority,
            submitted=spec.submit,
            duration_s=spec.duration_s,
            checkpointable=spec.checkpointable,
            oracle_s=spec.work_s,
        )
        runs[spec.id] = JobRun(spec, job, remaining=spec.work_s)
    sim = _Sim(workload, config, seed, cluster, np.random.default_rng([seed, 2]), runs)
    for spec in workload.jobs:
        sim.push(spec.submit, ARRIVE, spec.id)
    total_milli = cluster.total_gpu_milli
    started = time.perf_counter()
    done = 0
    n = len(runs)
    while sim.events:
        now = sim.events[0][0]
        while sim.events and sim.events[0][0] == now:
            _, kind, _, job_id, token = heapq.heappop(sim.events)
            if kind == WAKE:
                if now >= sim.next_wake:
                    sim.next_wake = float("inf")
                continue
            run = runs[job_id]
            if kind == ARRIVE:
                sim.arrive(run, now)
            elif kind == END and token == run.token and run.placements:
                sim.end(run, now)
                done += 1
                if progress is not None and done % 500 == 0:
                    progress(done, n)
            elif kind == EVICT and token == run.token and run.placements:
                sim.evict(run, now)
        sim.cycle(now)
        sim.record(now, total_milli)
    if progress is not None:
        progress(n, n)
    arrivals = [j.submit for j in workload.jobs]
    return TimelineResult(
        policy=policy,
        seed=seed,
        total_gpus=total_milli // 1000,
        times=np.array(sim.times),
        alloc=np.array(sim.alloc),
        queue=np.array(sim.queue, dtype=np.int64),
        jobs=list(runs.values()),
        jain_times=np.array(sim.jain_t),
        jain=np.array(sim.jain_v),
        first_arrival=min(arrivals),
        last_arrival=max(arrivals),
        window_start=min(arrivals) if workload.window_start is None else workload.window_start,
        cycles=sim.cycles,
        wall_s=time.perf_counter() - started,
        preemptions=sim.preemptions,
        offered_load=workload.offered_load(),
        queue_shares={q: sim.shares.get(q, QueueShare()) for q in workload.queues.leaves},
        jain_whole_jobs=np.array(sim.jain_whole),
        large_wait_causes=sim.wait_causes,
    )
