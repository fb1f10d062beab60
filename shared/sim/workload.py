"""Multi-tenant workloads for the timeline simulator: the openb pod list and the Philly traces.

Every trace becomes a list of :class:`SimJob` (what the job asks for, when it arrives, how much
work it is) and a cluster.  Reading is pure apart from the CSV and trace files themselves.

**openb** (``--pods --nodes``): each pod is a one-task job submitted at ``creation_time`` that
runs for ``deletion_time - creation_time`` once started; its ``qos`` gives its priority class
(LS -> high, Guaranteed and Burstable -> normal, BE -> best-effort: ``shared/core/priority.py``).
All pods share one queue ``openb`` (the trace names no tenants).  Pods without a deletion time
run until the end of the trace.  The list is a sample (8,152 pods over 150 days) of a
6,212-GPU cluster's workload: replayed on that whole cluster it offers 0.2% load and nothing
ever waits.  So the CLI replays it faster (arrivals compressed 50x, into 3 days; run times
unchanged) on a proportional share of the nodes (the same share of every node kind), sized so
that the offered load is ``--load``; both are reported.

**philly** (``--philly DIR --throughputs CSV``): every ``DIR/*.trace`` file is one virtual
cluster (VC) of Microsoft's Philly cluster, as Gavel's authors derived them (tab-separated:
job type, command, steps flag, data flag, total steps, arrival time, GPUs).  Each VC is a queue
and tenant; its weight and guarantee are proportional to its GPU-hours.  A job's run time is
``total_steps / steps_per_s`` on a V100 from Gavel's measured isolated throughputs (how Gavel's
simulator derives it).  About 8% of (job type, GPU count) pairs have no measurement (jobs of
types measured only on 1 GPU run on 2-8, and every type above 8 GPUs): those take the largest
measured GPU count below theirs and scale its throughput linearly (``steps_per_s(k) =
steps_per_s(k0) * k / k0``, the optimistic choice; the README says so).  Jobs of up to 8 GPUs
are one task on one node; larger ones are gangs of 8-GPU tasks (12 -> 2 x 6, 24 -> 3 x 8), all
or nothing.  Jobs are checkpointable (DNN training saves state; Tiresias makes the same
assumption).  The cluster is 8-GPU nodes, as many as make the offered load ``load`` (0.9).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from shared.core.priority import class_of_qos, class_value
from shared.core.queues import QueueSpec, QueueTree, vector
from shared.core.task import MILLI, NodeSpec, TaskShape
from shared.sim.runtimes import FloatArray, expected_clipped
from shared.sim.trace import TraceError, TracePod

PHILLY_NODE = NodeSpec("philly", cpu_milli=64_000, memory_mib=512 * 1024, gpu_count=8, gpu_model="V100")
"""A Philly node as the simulator builds them (the trace's servers have 8 GPUs)."""
PHILLY_CPU_PER_GPU = 4_000
PHILLY_MEM_PER_GPU = 32 * 1024


@dataclass(frozen=True)
class SimJob:
    id: str
    queue: str
    tenant: str
    shape: TaskShape
    replicas: int
    submit: float
    work_s: float  # run time at full size (replicas tasks), from the trace
    min_replicas: int = 0  # 0: all replicas (rigid)
    priority: int = 0
    checkpointable: bool = False
    duration_s: float | None = None  # the estimate a user would give; None: none
    speed: tuple[float, ...] = ()
    """Relative speed with k tasks (index k-1), 1.0 at full size: elastic jobs only."""

    @property
    def gpus(self) -> float:
        return self.shape.total_gpu_milli * self.replicas / MILLI

    @property
    def fewest_gpus(self) -> float:
        """The GPUs it needs at once to start (an elastic job's minimum; else all of them)."""
        return self.shape.total_gpu_milli * (self.min_replicas or self.replicas) / MILLI

    def rate(self, tasks: int) -> float:
        """Work done per second with ``tasks`` tasks (1.0 at full size)."""
        if tasks == self.replicas or not self.speed:
            return 1.0
        return self.speed[tasks - 1]


@dataclass(frozen=True)
class Workload:
    name: str
    nodes: tuple[NodeSpec, ...]
    jobs: tuple[SimJob, ...]
    queues: QueueTree
    dropped: int = 0  # jobs no node could ever hold (admission would reject them)
    compress: float = 1.0
    notes: dict[str, float] = field(default_factory=dict)
    window_start: float | None = None
    """Where the window the load is offered in (and utilisation measured) starts; None: the
    first arrival.  It ends at the last arrival."""

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)

    def offered_load(self) -> float:
        """The share of the cluster's GPUs the jobs would hold while they arrive, each started
        on arrival: GPU-seconds inside the arrival window (a job's run clipped at the last
        arrival) over GPU-seconds the cluster has in it.  Clipping matters: a few pods of openb
        run for months, far past the window, and would otherwise count as load it never sees."""
        return offered_load(self.jobs, self.total_gpus, self.window_start)


def offered_load(jobs: Sequence[SimJob], gpus: float, start: float | None = None) -> float:
    """GPU-seconds of the jobs' runs (each started on arrival) inside [start, last arrival]
    over the cluster's GPU-seconds in it; ``start`` None: the first arrival."""
    if not jobs:
        return 0.0
    last = max(j.submit for j in jobs)
    first = min(j.submit for j in jobs) if start is None else start
    demand = sum(j.gpus * max(0.0, min(j.submit + j.work_s, last) - max(j.submit, first)) for j in jobs)
    return demand / max(1.0, gpus * (last - first))


def busy_window_start(jobs: Sequence[SimJob], share: float = 0.1) -> float:
    """The arrival time by which ``share`` of the jobs have arrived.  The openb pod list is a
    snapshot of the pods alive at one moment: 90% of them were created in the last 30 of its 150
    days, the rest over the 120 days before (those still alive then: the long runners).  Over
    all 150 days the cluster would look idle while it is in fact queueing at the end, so the
    load is offered, and utilisation measured, from the 10th-percentile arrival on."""
    times = sorted(j.submit for j in jobs)
    return times[min(len(times) - 1, int(share * len(times)))] if times else 0.0


def openb_workload(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], name: str = "openb") -> Workload:
    cap = max((n.cpu_milli, n.memory_mib, n.gpu_count) for n in nodes)
    end = max((p.deletion_time or p.creation_time) for p in pods)
    jobs: list[SimJob] = []
    dropped = 0
    for p in pods:
        s = p.shape
        if not any(
            n.cpu_milli >= s.cpu_milli
            and n.memory_mib >= s.memory_mib
            and n.gpu_count >= s.num_gpu
            and (not s.num_gpu or not s.gpu_models or n.gpu_model in s.gpu_models)
            for n in nodes
        ):
            dropped += 1
            continue
        run = (p.deletion_time if p.deletion_time is not None else end) - p.creation_time
        jobs.append(
            SimJob(
                id=p.name,
                queue="openb",
                tenant="openb",
                shape=s,
                replicas=1,
                submit=p.creation_time,
                work_s=max(1.0, run),
                priority=class_value(class_of_qos(p.qos)),
            )
        )
    del cap
    queues = QueueTree([QueueSpec("openb")])
    return Workload(name, tuple(nodes), tuple(jobs), queues, dropped, window_start=busy_window_start(jobs))


def load_throughputs(path: Path) -> dict[tuple[str, int], float]:
    """Gavel's isolated throughputs on V100, (job type, GPUs) -> steps per second."""
    table: dict[tuple[str, int], float] = {}
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(path, 0, f"cannot open: {exc.strerror}") from None
    with handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                if row["worker_type"] == "v100":
                    table[(row["job_type"], int(row["scale_factor"]))] = float(row["steps_per_s"])
            except (KeyError, ValueError):
                raise TraceError(
                    path, line, "expected worker_type, job_type, scale_factor, steps_per_s"
                ) from None
    if not table:
        raise TraceError(path, 1, "no v100 throughputs")
    return table


def steps_per_s(table: dict[tuple[str, int], float], job_type: str, gpus: int) -> tuple[float, bool]:
    """Throughput with ``gpus`` GPUs and whether it was measured (else scaled linearly from the
    largest measured GPU count below)."""
    if (job_type, gpus) in table:
        return table[(job_type, gpus)], True
    below = [k for (t, k) in table if t == job_type and k < gpus]
    if not below:
        raise KeyError(f"no throughput for {job_type!r} at any GPU count up to {gpus}")
    k0 = max(below)
    return table[(job_type, k0)] * gpus / k0, False


def _layout(gpus: int) -> tuple[int, int]:
    """(tasks, GPUs per task): one task up to 8 GPUs, else the fewest tasks of equal size <= 8."""
    if gpus <= 8:
        return 1, gpus
    tasks = math.ceil(gpus / 8)
    while gpus % tasks:
        tasks += 1
    return tasks, gpus // tasks


def philly_workload(
    folder: Path,
    throughputs: Path,
    load: float = 0.9,
    compress: float = 1.0,
    elastic_fraction: float = 0.0,
    seed: int = 0,
    jitter_s: float = 0.0,
    jitter_seed: int = 0,
    duration_error: float | None = None,
    runtimes: FloatArray | None = None,
) -> Workload:
    """Merge every ``*.trace`` in ``folder``; arrival times are divided by ``compress``.

    ``jitter_s``: every arrival comes later by a uniform draw in [0, ``jitter_s``) seconds
    (``jitter_seed`` draws it; the cluster is sized from the arrivals as they are, so every draw
    gets the same nodes).  Philly's nodes are all alike, so without it every seed of a simulation
    replays the same run; with it, jobs submitted within a few seconds of each other (the
    trace's bursts) come in each seed's own order, and the seeds are distinct draws.

    ``duration_error``: None (the trace as it is: jobs declare no duration, the scheduler learns
    run times from finished jobs), or each job declares a duration (``duration-s``) of its run
    time times ``exp(duration_error * N(0, 1))``, drawn by ``jitter_seed``.  A Philly job names its
    steps on its command line and the throughput table is its model's profiled speed, so a
    duration can be declared; the error stands for what that misses (0: exact; 1: a typical
    error of a factor of 2.7 either way).  Every policy reads a declared duration (backfill and
    reservations); ``sjf`` still reads the true run time.

    ``runtimes``: None (run times from the throughputs), or a sorted list of run times in seconds
    (``shared/sim/runtimes.py``) from which each job draws its own, by ``jitter_seed``.  The
    cluster is then sized from the expected draw, so every seed gets the same nodes."""
    if duration_error is not None and duration_error < 0:
        raise ValueError("duration_error must be at least 0")
    table = load_throughputs(throughputs)
    files = sorted(folder.glob("*.trace"))
    if not files:
        raise TraceError(folder, 0, "no *.trace files")
    raw: list[
        tuple[str, str, float, int, float, float]
    ] = []  # vc, type, arrival, gpus, work, v100 1-GPU rate
    estimated = 0
    for path in files:
        vc = path.stem
        with path.open() as handle:
            for line, text in enumerate(handle, start=1):
                parts = text.rstrip("\n").split("\t")
                if len(parts) != 7:
                    raise TraceError(path, line, f"expected 7 tab-separated fields, got {len(parts)}")
                try:
                    job_type, steps, arrival, gpus = parts[0], int(parts[4]), float(parts[5]), int(parts[6])
                except ValueError:
                    raise TraceError(path, line, "total steps, arrival and GPUs must be numbers") from None
                rate, measured = steps_per_s(table, job_type, gpus)
                estimated += not measured
                raw.append((vc, job_type, arrival / compress, gpus, steps / rate, rate))
    rng = np.random.default_rng([seed, 7])
    gpu_hours: dict[str, float] = defaultdict(float)
    mean = None if runtimes is None else float(runtimes.mean())
    for vc, _, _, gpus, work, _ in raw:  # drawn run times: each VC's expected GPU-hours
        gpu_hours[vc] += gpus * (work if mean is None else mean) / 3600
    span = max(r[2] for r in raw) - min(r[2] for r in raw)
    last = max(r[2] for r in raw)
    if runtimes is None:
        demand_s = sum(g * min(w, last - a) for _, _, a, g, w, _ in raw)  # as offered_load counts it
    else:
        limits = np.array([last - a for _, _, a, _, _, _ in raw])
        demand_s = float(np.dot([g for _, _, _, g, _, _ in raw], expected_clipped(runtimes, limits)))
        drawn = np.random.default_rng([jitter_seed, 17]).choice(runtimes, len(raw))
        raw = [(vc, t, a, g, float(d), r) for (vc, t, a, g, _, r), d in zip(raw, drawn, strict=True)]
    nodes_needed = max(8, math.ceil(demand_s / (load * span * PHILLY_NODE.gpu_count)))
    nodes = tuple(replace(PHILLY_NODE, name=f"philly-{i:03d}") for i in range(nodes_needed))
    total = nodes_needed * PHILLY_NODE.gpu_count
    if jitter_s > 0:
        shift = np.random.default_rng([jitter_seed, 11]).uniform(0.0, jitter_s, len(raw))
        raw = [(vc, t, a + float(d), g, w, r) for (vc, t, a, g, w, r), d in zip(raw, shift, strict=True)]
    jobs: list[SimJob] = []
    for n, (vc, job_type, arrival, gpus, work, _rate) in enumerate(sorted(raw, key=lambda r: (r[2], r[0]))):
        tasks, per = _layout(gpus)
        shape = TaskShape(PHILLY_CPU_PER_GPU * per, PHILLY_MEM_PER_GPU * per, per, MILLI)
        job = SimJob(
            id=f"{vc}-{n:05d}",
            queue=vc,
            tenant=vc,
            shape=shape,
            replicas=tasks,
            submit=arrival,
            work_s=work,
            checkpointable=True,
        )
        if tasks == 1 and gpus > 1 and rng.random() < elastic_fraction:
            # Elastic as replicas of one GPU each, 1..gpus, at the measured speed per size.
            one = TaskShape(PHILLY_CPU_PER_GPU, PHILLY_MEM_PER_GPU, 1, MILLI)
            full = steps_per_s(table, job_type, gpus)[0]
            speed = tuple(steps_per_s(table, job_type, k)[0] / full for k in range(1, gpus + 1))
            job = replace(job, shape=one, replicas=gpus, min_replicas=1, speed=speed)
        jobs.append(job)
    if duration_error is not None:
        error = np.exp(duration_error * np.random.default_rng([jitter_seed, 13]).standard_normal(len(jobs)))
        jobs = [replace(j, duration_s=j.work_s * float(e)) for j, e in zip(jobs, error, strict=True)]
    hours = sum(gpu_hours.values())
    queues = QueueTree(
        QueueSpec(
            name=vc,
            weight=gpu_hours[vc] / hours,
            guarantee=vector(
                gpu=math.floor(total * gpu_hours[vc] / hours) * MILLI,
            ),
            tenants=(vc,),
        )
        for vc in sorted(gpu_hours)
    )
    return Workload(
        "philly",
        nodes,
        tuple(jobs),
        queues,
        compress=compress,
        notes={"throughputs_estimated": estimated, "jobs": len(raw)}
        | ({"duration_error": duration_error} if duration_error is not None else {}),
    )


Loader = Callable[[], Workload]
