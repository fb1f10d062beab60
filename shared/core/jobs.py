"""What a scheduling cycle knows about jobs: pending requests, running jobs, reservations.

Small frozen dataclasses in the core's units, built by the shell (the event fold, the
simulator) from whatever it keeps; the cycle never sees a wire model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.core.cluster import Placement
from shared.core.task import TaskShape


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the cycle sees it: ``replicas`` identical tasks of ``shape``.

    ``min_replicas`` is the fewest tasks the job may run with: ``replicas`` for a plain job (all
    of them start together or none does), ``gang.min-member`` or the elastic minimum otherwise;
    those start together, all or nothing, and the job may grow to ``replicas`` later.
    """

    id: str
    queue: str
    tenant: str
    shape: TaskShape
    replicas: int = 1
    min_replicas: int = 0  # 0: equal to replicas
    priority: int = 0
    submitted: float = 0.0
    queued_since: float = -1.0  # when it last became pending (-1: at submission)
    duration_s: float | None = None  # the user's estimate (duration-s), None: unknown
    checkpointable: bool = False
    gang_timeout_s: float = 300.0
    attempt: int = 0
    preemptions: int = 0
    attained_gpu_s: float = 0.0  # GPU-seconds received so far (Tiresias' LAS orders by it)
    oracle_s: float | None = None  # true remaining run time: only the SJF reference policy reads it

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"job {self.id!r}: replicas must be at least 1")
        if not 0 <= self.min_replicas <= self.replicas:
            raise ValueError(f"job {self.id!r}: min_replicas must lie in 0..replicas")

    @property
    def fewest(self) -> int:
        return self.min_replicas or self.replicas

    @property
    def elastic(self) -> bool:
        return self.fewest < self.replicas

    @property
    def since(self) -> float:
        """When the job's current wait began."""
        return self.submitted if self.queued_since < 0 else self.queued_since

    @property
    def gpus(self) -> float:
        """GPUs one full-size run holds (shares count as fractions)."""
        return self.shape.total_gpu_milli * self.replicas / 1000.0


@dataclass(frozen=True, slots=True)
class Running:
    """A job holding resources: its placements (one per task), when this attempt started."""

    job: Job
    placements: tuple[Placement, ...]
    started: float
    last_checkpoint: float | None = None
    preempting: bool = False  # a preemption of it is already in flight: not a victim again
    leaving: int = 0
    """Of its tasks, how many an eviction or shrink in flight takes away (all of them for an
    eviction).  Their room no longer counts as its queue's: counted, a queue whose victims were
    still stopping looked as if it still borrowed, and reclaim evicted a second round for the
    same shortfall (live: 26 evictions for 16 GPUs borrowed, then the victims' queue took 10 back)."""
    demand: tuple[int, int, int] = field(default=(0, 0, 0), init=False, compare=False, repr=False)
    """(milli-GPU, milli-CPU, MiB) it holds: summed per queue by every cycle, so kept."""
    task_rows: tuple[tuple[int, int, int, int, int], ...] = field(
        default=(), init=False, compare=False, repr=False
    )
    """Per task: (index, node, milli-CPU, MiB, milli-GPU).  Every cycle that looks for victims
    lays the running tasks out as arrays; a shell that keeps its ``Running`` objects between
    cycles (the placement workers do) then pays for each job once, not once per cycle."""

    def __post_init__(self) -> None:
        s, k = self.job.shape, len(self.placements)
        object.__setattr__(self, "demand", (s.total_gpu_milli * k, s.cpu_milli * k, s.memory_mib * k))
        rows = tuple(
            (i, p.node, p.task.cpu_milli, p.task.memory_mib, p.task.total_gpu_milli)
            for i, p in enumerate(self.placements)
        )
        object.__setattr__(self, "task_rows", rows)

    @property
    def replicas(self) -> int:
        return len(self.placements)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for a blocked job as they free up: no other job may take room there, except a
    backfill that ends before ``expected_start``.  ``preemption``: the room is being freed by
    victims of this job, so it starts as soon as they are gone."""

    job: str
    nodes: tuple[int, ...]
    since: float
    expected_start: float
    timeout_at: float
    preemption: bool = False


@dataclass
class RuntimeEstimator:
    """Expected run times learned from finished jobs, for backfill and reservations.

    The user's ``duration-s`` wins when given.  Otherwise: the mean of the tenant's finished
    jobs of the same shape and size, else of the tenant's, else of everyone's, else
    ``default_s``.  Fed by the shell (:meth:`observe`) as jobs finish; the cycle only reads it.
    """

    default_s: float = 3600.0
    # Running means (the value every estimate reads), by (tenant, shape fields, replicas), by
    # tenant, and overall; the sums behind them.
    _mean_key: dict[tuple[object, ...], float] = field(default_factory=dict)
    _mean_tenant: dict[str, float] = field(default_factory=dict)
    _mean_all: float | None = None
    _sums: dict[object, tuple[float, int]] = field(default_factory=dict)

    @staticmethod
    def _key(job: Job) -> tuple[object, ...]:
        s = job.shape
        return (job.tenant, s.cpu_milli, s.memory_mib, s.num_gpu, s.gpu_milli, s.gpu_models, job.replicas)

    def _add(self, key: object, run_s: float) -> float:
        total, n = self._sums.get(key, (0.0, 0))
        self._sums[key] = (total + run_s, n + 1)
        return (total + run_s) / (n + 1)

    def observe(self, job: Job, run_s: float) -> None:
        key = self._key(job)
        self._mean_key[key] = self._add(("shape", *key), run_s)
        self._mean_tenant[job.tenant] = self._add(("tenant", job.tenant), run_s)
        self._mean_all = self._add(("all",), run_s)

    def to_json(self) -> dict[str, object]:
        """The learnt sums, as JSON (a snapshot of the view carries them)."""
        rows = []
        for key, (total, n) in self._sums.items():
            assert isinstance(key, tuple)
            rows.append([[list(k) if isinstance(k, tuple) else k for k in key], total, n])
        return {"default_s": self.default_s, "sums": rows}

    @classmethod
    def from_json(cls, body: dict[str, object]) -> RuntimeEstimator:
        est = cls(default_s=float(body.get("default_s", 3600.0)))  # type: ignore[arg-type]
        for raw_key, total, n in body.get("sums", []):  # type: ignore[attr-defined]
            key = tuple(tuple(k) if isinstance(k, list) else k for k in raw_key)
            est._sums[key] = (float(total), int(n))
            mean = float(total) / int(n)
            if key[0] == "all":
                est._mean_all = mean
            elif key[0] == "tenant":
                est._mean_tenant[str(key[1])] = mean
            else:
                est._mean_key[key[1:]] = mean
        return est

    def estimate(self, job: Job) -> float:
        if job.duration_s is not None:
            return job.duration_s
        found = self._mean_key.get(self._key(job))
        if found is not None:
            return found
        found = self._mean_tenant.get(job.tenant)
        if found is not None:
            return found
        return self._mean_all if self._mean_all is not None else self.default_s

    def expected_end(self, running: Running, now: float) -> float:
        """When a running job should end: its start plus its estimate, or soon if it is late."""
        est = self.estimate(running.job)
        end = running.started + est
        return end if end > now else now + 0.1 * est


def by_node(running: Sequence[Running]) -> dict[int, list[tuple[Running, int]]]:
    """Running jobs by node: (job, task index) for each task on that node."""
    out: dict[int, list[tuple[Running, int]]] = defaultdict(list)
    for r in running:
        for i, p in enumerate(r.placements):
            out[p.node].append((r, i))
    return out
