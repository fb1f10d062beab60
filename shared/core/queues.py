"""Queues: a tree with weights, guaranteed (deserved) and maximum quotas, and who may use them.

A queue's quotas are resource vectors over three dimensions, in the core's units: GPU in milli-GPU
(whole GPUs and GPU shares count alike: 16 GPUs = 16,000), CPU in milli-cores, memory in MiB.

* ``guarantee``: what the queue gets back by reclaim whenever its jobs ask for it (Kueue's
  nominal quota, Volcano's ``deserved``).  Guarantees of siblings should not exceed their parent's.
* ``max``: what the queue (its subtree) may never exceed, borrowing included (Volcano's
  ``capability``).  Admission rejects a job whose request alone exceeds it (``over-quota``).
* ``weight``: how idle capacity beyond the guarantees is split between siblings that want it.

The *deserved* share of each queue at a moment is a max-min fair water-filling of the
cluster's capacity down the tree (Volcano's proportion plugin, per dimension): a parent's
deserved amount goes first to its children's guarantees (each capped by its demand), then the
rest by weight, never above a child's demand or ``max``.  A queue may *use* more than it
deserves (it borrows idle room); DRF gives room that frees to the queue furthest below its
deserved share, and reclaim takes back what a queue holds beyond its guarantee when a queue
below its guarantee has work waiting (reclaiming up to deserved shares was measured and not
kept: ``docs/results/timeline/history.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from shared.core.priority import class_value
from shared.core.task import TaskShape

FloatArray = npt.NDArray[np.float64]
DIMENSIONS = ("gpu", "cpu", "memory")
"""Resource vector order: milli-GPU, milli-CPU, MiB."""
UNLIMITED = float("inf")
ROOT = "root"
QUEUE_GONE = "QueueGone"  # the plugin name of a job whose queue the tree does not have
TENANT_BARRED = "TenantBarred"  # ... of a job whose tenant its queue (or one above) does not allow


def vector(gpu: float = 0.0, cpu: float = 0.0, memory: float = 0.0) -> FloatArray:
    return np.array([gpu, cpu, memory], dtype=np.float64)


def unlimited() -> FloatArray:
    return np.full(3, UNLIMITED)


def demand_of(shape: TaskShape, replicas: int = 1) -> FloatArray:
    """What ``replicas`` tasks of ``shape`` take, as a resource vector."""
    return vector(shape.total_gpu_milli * replicas, shape.cpu_milli * replicas, shape.memory_mib * replicas)


@dataclass(frozen=True)
class LargeJobRule:
    """An operator's rule on a queue: jobs that need at least ``min_gpus`` GPUs at once to start
    (all replicas of a rigid job, a gang's ``min-member``, an elastic job's minimum) run at least
    at the priority of class ``priority_class``.  What starts small never waits for a whole node
    to drain, so an elastic job is judged by its minimum, not by what it may grow to.

    Slurm's multifactor priority has such a term (its job-size factor favours large jobs); here
    it is a floor, so that with the queue's ``preempt-after`` a large job that waited long may
    preempt smaller, lower-priority work (the source article's 24 h case).  A job that asks for
    more keeps what it asks for."""

    min_gpus: float
    priority_class: str

    def __post_init__(self) -> None:
        if self.min_gpus <= 0:
            raise ValueError(f"large-job rule: min-gpus must be positive, got {self.min_gpus}")
        class_value(self.priority_class)  # KeyError naming the classes there are

    @property
    def priority(self) -> int:
        return class_value(self.priority_class)


@dataclass(frozen=True, eq=False)
class QueueSpec:
    name: str
    parent: str = ROOT
    weight: float = 1.0
    guarantee: FloatArray = field(default_factory=lambda: vector())
    max: FloatArray = field(default_factory=unlimited)
    tenants: tuple[str, ...] = ("*",)
    preempt_after_s: float | None = None
    """A job waiting longer than this may preempt lower-priority work anywhere (None: never)."""
    large_jobs: LargeJobRule | None = None
    """The class large jobs of this queue run at least at (None: their own)."""

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"queue {self.name!r}: weight must be positive")
        if self.name == ROOT:
            raise ValueError(f"{ROOT!r} is the tree's implicit root, not a queue name")
        if bool((self.guarantee > self.max).any()):
            raise ValueError(f"queue {self.name!r}: guarantee exceeds max")

    def allows(self, tenant: str) -> bool:
        return "*" in self.tenants or tenant in self.tenants


class QueueTree:
    """The queues, their parents and children; jobs live in leaf queues."""

    def __init__(self, queues: Iterable[QueueSpec]) -> None:
        self.specs: dict[str, QueueSpec] = {}
        for q in queues:
            if q.name in self.specs:
                raise ValueError(f"queue {q.name!r} is defined twice")
            self.specs[q.name] = q
        self.children: dict[str, list[str]] = {ROOT: []}
        for q in self.specs.values():
            if q.parent != ROOT and q.parent not in self.specs:
                raise ValueError(f"queue {q.name!r}: parent {q.parent!r} does not exist")
            self.children.setdefault(q.parent, []).append(q.name)
            self.children.setdefault(q.name, [])
        for kids in self.children.values():
            kids.sort()
        self._check_acyclic()
        self.leaves: tuple[str, ...] = tuple(sorted(n for n in self.specs if not self.children[n]))

    def _check_acyclic(self) -> None:
        seen: set[str] = set()
        stack = [ROOT]
        while stack:
            node = stack.pop()
            seen.add(node)
            stack.extend(self.children.get(node, []))
        missing = set(self.specs) - seen
        if missing:
            raise ValueError(f"queues {sorted(missing)} form a cycle")

    def refusing(self, queue: str, tenant: str) -> str | None:
        """The nearest of ``queue`` and the queues above it that does not allow ``tenant`` (a
        parent's list bounds its whole subtree), else None."""
        return next((a for a in self.ancestors(queue) if not self.specs[a].allows(tenant)), None)

    def barred(self, queue: str, tenant: str) -> tuple[str, str] | None:
        """(plugin, why) where this tree keeps a job of ``tenant`` in ``queue`` from running, else
        None: the queue is not in the tree (``QueueGone``), or it or a queue above it does not
        allow the tenant (``TenantBarred``).  Admission refuses such a job; one admitted under an
        earlier tree waits for a tree that lets it in.  Kept per pair (the cycle asks for every
        pending job it counts; a tree is never changed after it is built)."""
        key = (queue, tenant)
        if key not in self._barred:
            self._barred[key] = self._bar(queue, tenant)
        return self._barred[key]

    def _bar(self, queue: str, tenant: str) -> tuple[str, str] | None:
        if queue not in self.specs:
            return QUEUE_GONE, f"queue {queue!r} is not in the queue tree"
        refusing = self.refusing(queue, tenant)
        if refusing is None:
            return None
        return TENANT_BARRED, f"tenant {tenant!r} is no longer allowed on queue {refusing!r}"

    @cached_property
    def _barred(self) -> dict[tuple[str, str], tuple[str, str] | None]:
        return {}

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def __len__(self) -> int:
        return len(self.specs)

    def limiting(self, name: str) -> tuple[str, ...]:
        """Of ``name`` and the queues above it, those that set a ``max``, nearest first (empty
        for a queue the tree does not have)."""
        return self._limiting.get(name, ())

    @cached_property
    def _limiting(self) -> dict[str, tuple[str, ...]]:
        # Once per tree (a tree is never changed after it is built): placement asks for every
        # job it places, the cycle for every max check.
        return {
            q: tuple(a for a in self.ancestors(q) if bool(np.isfinite(self.specs[a].max).any()))
            for q in self.specs
        }

    def max_passed_alone(self, name: str, need: FloatArray) -> tuple[str, tuple[str, ...]] | None:
        """The nearest of ``name`` and the queues above it whose ``max`` ``need`` alone exceeds,
        with the dimensions it exceeds; None where every max holds it.  Admission rejects such a
        job (``over-quota``); a job admitted before a tree lowered the max waits for a new tree."""
        for q in self.limiting(name):
            over = tuple(
                d for d, n, c in zip(DIMENSIONS, need, self.specs[q].max, strict=True) if n > c + 1e-9
            )
            if over:
                return q, over
        return None

    def ancestors(self, name: str) -> list[str]:
        """``name`` and every queue above it, nearest first (the root excluded)."""
        out = []
        while name != ROOT:
            out.append(name)
            name = self.specs[name].parent
        return out

    @cached_property
    def preempt_after_s(self) -> dict[str, float | None]:
        """Per queue, the wait after which its jobs may preempt lower-priority work anywhere: its
        own ``preempt_after_s``, else the nearest ancestor's (jobs live in leaf queues, so a value
        set on a parent acts through its children); None: never."""
        return {
            q: next(
                (
                    self.specs[a].preempt_after_s
                    for a in self.ancestors(q)
                    if self.specs[a].preempt_after_s is not None
                ),
                None,
            )
            for q in self.specs
        }

    def preempt_at(self, queue: str, since: float) -> float | None:
        """When a job of ``queue`` waiting since ``since`` may preempt lower-priority work
        anywhere (its queue's ``preempt-after``); None: never.  One sum, compared as ``now >=
        at`` by every reader: ``now - since >= after`` can be false by a rounding at the very
        moment ``since + after`` that a cycle was woken for."""
        after = self.preempt_after_s.get(queue)
        return None if after is None else since + after

    @cached_property
    def large_jobs(self) -> dict[str, LargeJobRule | None]:
        """Per queue, the large-job rule its jobs follow: its own, else the nearest ancestor's
        (as ``preempt_after_s``); None: none."""
        return {
            q: next((self.specs[a].large_jobs for a in self.ancestors(q) if self.specs[a].large_jobs), None)
            for q in self.specs
        }

    def priority_of(self, queue: str, gpus: float, priority: int) -> tuple[int, LargeJobRule | None]:
        """The priority a job that needs ``gpus`` GPUs to start runs at in ``queue``, asking for
        ``priority``: raised to the queue's large-job class where it is large enough and asks
        for less.  Also the rule that raised it (None where none did).  Admission applies it
        when it accepts a job, the simulator when it loads one."""
        rule = self.large_jobs.get(queue)
        if rule is None or gpus < rule.min_gpus or priority >= rule.priority:
            return priority, None
        return rule.priority, rule

    def is_leaf(self, name: str) -> bool:
        return name in self.specs and not self.children[name]

    def subtree_totals(self, per_leaf: Mapping[str, FloatArray]) -> dict[str, FloatArray]:
        """Per queue (and ``root``), the sum of ``per_leaf`` over its subtree."""
        totals: dict[str, FloatArray] = {}

        def walk(node: str) -> FloatArray:
            own = per_leaf.get(node, vector()).copy()
            for child in self.children.get(node, []):
                own += walk(child)
            totals[node] = own
            return own

        walk(ROOT)
        return totals

    def deserved(self, capacity: FloatArray, demand: Mapping[str, FloatArray]) -> dict[str, FloatArray]:
        """Each queue's deserved amount given the leaves' demands (pending plus running)."""
        want = self.subtree_totals(demand)
        for name, spec in self.specs.items():
            want[name] = np.minimum(want[name], spec.max)
        out: dict[str, FloatArray] = {ROOT: capacity.astype(np.float64).copy()}

        def split(parent: str) -> None:
            kids = self.children.get(parent, [])
            if not kids:
                return
            budget = out[parent].copy()
            specs = [self.specs[k] for k in kids]
            need = np.vstack([want[k] for k in kids])
            cap = np.vstack([np.minimum(need[i], s.max) for i, s in enumerate(specs)])
            grant = np.minimum(np.vstack([s.guarantee for s in specs]), cap)
            total_guarantee = grant.sum(axis=0)
            # Guarantees first; where they exceed the budget, scale them down together.
            over = total_guarantee > budget
            scale = np.ones_like(budget)
            np.divide(budget, total_guarantee, out=scale, where=over)
            grant = grant * scale[None, :]
            left = budget - grant.sum(axis=0)
            weights = np.array([s.weight for s in specs])
            grant = _water_fill(grant, cap, left, weights)
            for i, k in enumerate(kids):
                out[k] = grant[i]
                split(k)

        split(ROOT)
        return out


def _water_fill(grant: FloatArray, cap: FloatArray, left: FloatArray, weights: FloatArray) -> FloatArray:
    """Give ``left`` (per dimension) to rows by weight, never above ``cap``, redistributing what
    a capped row cannot take (max-min fair)."""
    grant = grant.copy()
    for d in range(grant.shape[1]):
        rest = float(left[d])
        open_rows = grant[:, d] < cap[:, d] - 1e-9
        while rest > 1e-9 and open_rows.any():
            w = np.where(open_rows, weights, 0.0)
            offer = rest * w / w.sum()
            room = cap[:, d] - grant[:, d]
            take = np.minimum(offer, room)
            grant[:, d] += np.where(open_rows, take, 0.0)
            rest -= float(take[open_rows].sum())
            open_rows = grant[:, d] < cap[:, d] - 1e-9
            if not (offer[open_rows] > 0).any():
                break
    return grant


def dominant_share(usage: Sequence[float], deserved: Sequence[float]) -> float:
    """DRF against the deserved share: the largest usage / deserved over dimensions that the
    queue uses (a queue deserving nothing of a dimension it uses is infinitely over)."""
    top = 0.0
    for u, d in zip(usage, deserved, strict=True):
        if u > 0:
            top = max(top, u / d if d > 0 else float("inf"))
    return top


def open_tree(names: Sequence[str]) -> QueueTree:
    """Flat queues open to every tenant, equal weights, no guarantees, no limits (the default)."""
    return QueueTree(QueueSpec(name=n) for n in names)
