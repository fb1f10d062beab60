"""Scarce homes: the nodes that are the only places a constrained waiting job can ever run.

A job pinned to a GPU model that few nodes have, or asking more cores than most nodes have, can
start only when one of its few *homes* (the nodes whose capacity holds one of its tasks) drains.
A 1-GPU pod that could run on any of seventy nodes and lands on one of them delays that job by
its whole run time: on a pinned openb variant (``gpuspec33-g1``) a 1-GPU pod of 206 hours took
one of the two nodes with 128 cores while four 8-GPU, 120-core pods waited for them, and they
waited 207 hours (``docs/results/timeline/history.md``, 2026-12-06, nineteenth stop).

So while such a job waits, a task whose own homes are more numerous keeps off its homes if it
fits anywhere else: each replica is placed first on the nodes outside the homes of the scarce
waiting jobs that have *fewer* homes than it, and only if none of them fits, on the rest.
Nothing waits for this rule (a task that fits only on spared nodes is placed there), so it moves
work and never idles it; it is the "most constrained first" rule of matching, applied to where
room frees up.  Jobs with as many homes as the task (the same shape, or one that fits the same
nodes) compete as before, and on a cluster of equal nodes every job has the same homes, so the
rule does nothing there (Philly: identical runs).

A waiting job's homes are *scarce* when they are at most ``SCARCE_HOMES_PER_REPLICA`` (two) per
replica it needs at once: then one long task on one of them takes at least half of its choice.
With more homes the first to drain comes soon whatever one task does, and sparing them moves
common pods off the nodes the fragmentation scorer picked for no gain: sparing the homes of
every more constrained job (a 4-GPU pod's from a 1-GPU pod, a model-pinned pod's thirty nodes)
gave 0.2 to 0.45 points less utilisation than sparing scarce homes only, on both pinned
variants measured, and no shorter 8-GPU waits (``docs/results/timeline/history.md``).

Homes depend on the nodes' capacities alone, never on what runs, so they are computed once per
shape and cluster and kept in the shell's memo, with the waiting jobs whose homes are scarce,
followed through each ``PendingDelta`` (a Philly backlog is some 900 jobs a cycle, and judging
each of them every cycle cost the timeline simulator 8% of its speed).  What a cycle builds is
the ladder of those few jobs' home counts, once, when its first task is placed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.core.cluster import BoolArray, ClusterState
from shared.core.framework import Profile
from shared.core.jobs import Job
from shared.core.memo import PendingDelta
from shared.core.task import NodeSpec, TaskShape

SCARCE_HOMES_PER_REPLICA = 2
"""A waiting job's homes are spared while they number at most this many per replica it needs."""


@dataclass
class HomeIndex:
    """Each shape's homes on one cluster's nodes (capacity only), computed on first use, and the
    waiting jobs whose homes are scarce, as of the snapshot numbered ``generation``."""

    specs: tuple[NodeSpec, ...]
    profile: Profile  # its filters say where a task could ever run
    _homes: dict[TaskShape, tuple[BoolArray, int]] = field(default_factory=dict)
    scarce: dict[str, tuple[TaskShape, int]] = field(default_factory=dict)
    """Per waiting job whose homes are scarce: its shape and the replicas it needs at once."""
    generation: int = -1

    def is_scarce(self, cluster: ClusterState, shape: TaskShape, fewest: int) -> bool:
        count = self.homes(cluster, shape)[1]
        return 0 < count <= SCARCE_HOMES_PER_REPLICA * fewest  # none: a job no node holds

    def rebuild(self, cluster: ClusterState, pending: Sequence[Job], generation: int) -> None:
        # Equal shapes are often one object (the simulator's): judge each object once.
        judged: dict[tuple[int, int], bool] = {}
        self.scarce = {}
        for job in pending:
            key = (id(job.shape), job.fewest)
            found = judged.get(key)
            if found is None:
                found = judged[key] = self.is_scarce(cluster, job.shape, job.fewest)
            if found:
                self.scarce[job.id] = (job.shape, job.fewest)
        self.generation = generation

    def follow(self, cluster: ClusterState, delta: PendingDelta) -> None:
        """Bring ``scarce`` from snapshot ``delta.previous`` to ``delta.generation``: a cycle
        judges the jobs that came, not the thousands that wait (a changed job left and came)."""
        for job_id in delta.removed:
            self.scarce.pop(job_id, None)
        for job in delta.added:
            if self.is_scarce(cluster, job.shape, job.fewest):
                self.scarce[job.id] = (job.shape, job.fewest)
        self.generation = delta.generation

    def homes(self, cluster: ClusterState, shape: TaskShape) -> tuple[BoolArray, int]:
        """The nodes whose capacity holds one task of ``shape``, and how many they are."""
        found = self._homes.get(shape)
        if found is None:
            mask = self.profile.could_ever_fit(cluster, shape)
            found = (mask, int(mask.sum()))
            self._homes[shape] = found
        return found


def home_index(cluster: ClusterState, profile: Profile, kept: HomeIndex | None) -> HomeIndex:
    """``kept`` if it was built for this cluster's very nodes and ``profile``, else a new one."""
    if kept is not None and kept.specs is cluster.specs and kept.profile is profile:
        return kept
    return HomeIndex(cluster.specs, profile)


@dataclass(frozen=True)
class HomeLadder:
    """The scarce waiting jobs' home counts, fewest first, each with the union of the homes of
    every scarce waiting shape that has at most that many (so one lookup answers any task)."""

    counts: tuple[int, ...]
    unions: tuple[BoolArray, ...]

    @classmethod
    def of(
        cls, index: HomeIndex, cluster: ClusterState, waiting: Iterable[tuple[TaskShape, int]]
    ) -> HomeLadder:
        """From the waiting jobs' (shape, replicas needed at once) pairs; those whose homes are
        not scarce are left out."""
        rows = [index.homes(cluster, s) for s, fewest in waiting if index.is_scarce(cluster, s, fewest)]
        rows.sort(key=lambda row: row[1])
        counts: list[int] = []
        unions: list[BoolArray] = []
        for mask, count in rows:
            if counts and counts[-1] == count:
                unions[-1] = unions[-1] | mask
            else:
                unions.append(mask if not unions else unions[-1] | mask)
                counts.append(count)
        return cls(tuple(counts), tuple(unions))

    def spared_from(self, index: HomeIndex, cluster: ClusterState, shape: TaskShape) -> BoolArray | None:
        """The nodes a task of ``shape`` keeps off while it fits elsewhere: the homes of every
        waiting shape with fewer homes than its own (None: there are none)."""
        below = bisect_left(self.counts, index.homes(cluster, shape)[1])
        return self.unions[below - 1] if below else None
