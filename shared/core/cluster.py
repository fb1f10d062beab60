"""The cluster model: every node's free CPU, memory and per-GPU milli-share, as numpy arrays.

The layout is struct-of-arrays so that filters and scorers look at all nodes at once without a
Python loop per node.  Absent GPU slots are padded with capacity 0 and free 0: a padded slot never
satisfies a request (every GPU request is at least 1 milli) and adds nothing to any sum, so no
code path needs a separate "does this GPU exist" mask.

Every change to a node sets ``version[node]`` to a 63-bit digest of the node's free state (CPU,
memory, per-GPU shares, task counts).  Scorers cache per-node values keyed by (node, version):
equal states share entries, so what a cycle scored on its private copy is still valid once the
service folds the same placements into its own view, and a different state never matches (up to
a 2^-63 collision, which the placement itself would refuse as a misfit rather than over-commit).
The digests never influence a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.core.task import MILLI, NodeSpec, TaskShape

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def affinity_columns(max_gpus: int) -> int:
    """Columns of ``ClusterState.affinity``: 0 = shared-GPU tasks, k = tasks of k whole GPUs
    (1..``max_gpus``, the largest node's GPU count: 8 on openb, 16 on an HGX node, 72 on an NVL
    rack).  Never fewer than 9, so the digests of 8-GPU clusters stay what they always were."""
    return max(9, max_gpus + 1)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one task went: the node index and the GPU slots it holds (empty for CPU tasks)."""

    node: int
    gpus: tuple[int, ...]
    task: TaskShape


class ClusterState:
    """Free and total resources of every node.  Mutated only through :meth:`place`/:meth:`remove`."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.specs: tuple[NodeSpec, ...] = tuple(nodes)
        self.names: tuple[str, ...] = tuple(names)
        self.index: dict[str, int] = {name: i for i, name in enumerate(names)}
        self.models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes if n.gpu_count > 0}))
        model_pos = {m: i for i, m in enumerate(self.models)}
        n = len(nodes)
        self.max_gpus = max(1, max(node.gpu_count for node in nodes))
        self.cpu_cap: IntArray = np.array([x.cpu_milli for x in nodes], dtype=np.int64)
        self.mem_cap: IntArray = np.array([x.memory_mib for x in nodes], dtype=np.int64)
        self.gpu_count: IntArray = np.array([x.gpu_count for x in nodes], dtype=np.int64)
        self.model_idx: IntArray = np.array(
            [model_pos[x.gpu_model] if x.gpu_count > 0 else -1 for x in nodes], dtype=np.int64
        )
        slots = np.arange(self.max_gpus)[None, :]
        self.gpu_cap: IntArray = np.where(slots < self.gpu_count[:, None], MILLI, 0).astype(np.int64)
        self.cpu_free: IntArray = self.cpu_cap.copy()
        self.mem_free: IntArray = self.mem_cap.copy()
        self.gpu_free: IntArray = self.gpu_cap.copy()
        self.affinity: IntArray = np.zeros((n, affinity_columns(self.max_gpus)), dtype=np.int64)
        # Nodes that may take new work: False while a node is cordoned (drain) or NotReady (its
        # agent's lease expired).  What runs there keeps its resources until it is evicted.
        self.schedulable: BoolArray = np.ones(n, dtype=np.bool_)
        # Digests from the start, not zeros: nodes of different sizes must never share one.
        self.version: IntArray = np.array([self._digest(i) for i in range(n)], dtype=np.int64)

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def spec_cpu_milli(self) -> float:
        """The normaliser of CPU in the spec-relative scorers: the largest node's CPU, at least the
        128 cores the FGD artifact assumes (so openb figures are the artifact's)."""
        return float(max(128_000, int(self.cpu_cap.max())))

    @property
    def spec_gpu_milli(self) -> float:
        """The largest node's GPUs in milli-GPU, at least the artifact's 8 GPUs."""
        return float(max(8 * MILLI, self.max_gpus * MILLI))

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_cap.sum())

    def used_gpu_milli(self) -> int:
        return int((self.gpu_cap - self.gpu_free).sum())

    def copy(self) -> ClusterState:
        """A deep copy whose arrays can be changed without touching this one (a cycle's snapshot)."""
        other = object.__new__(ClusterState)
        other.specs, other.names, other.index = self.specs, self.names, self.index
        other.models, other.max_gpus = self.models, self.max_gpus
        other.cpu_cap, other.mem_cap, other.gpu_count = self.cpu_cap, self.mem_cap, self.gpu_count
        other.model_idx, other.gpu_cap = self.model_idx, self.gpu_cap
        other.cpu_free = self.cpu_free.copy()
        other.mem_free = self.mem_free.copy()
        other.gpu_free = self.gpu_free.copy()
        other.affinity = self.affinity.copy()
        other.version = self.version.copy()
        other.schedulable = self.schedulable.copy()
        return other

    def gpus_per_model(self) -> npt.NDArray[np.float64]:
        """GPUs of each model in ``models``, in its order."""
        return np.array([float(self.gpu_count[self.model_idx == i].sum()) for i in range(len(self.models))])

    def model_mask(self, models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model is one of ``models`` (every GPU node when ``models`` is empty)."""
        if not models:
            return self.gpu_count > 0
        wanted = [i for i, m in enumerate(self.models) if m in models]
        return np.isin(self.model_idx, wanted)

    def fits(self, node: int, task: TaskShape, gpus: tuple[int, ...]) -> bool:
        """Whether ``task`` fits on ``node`` using exactly the GPU slots ``gpus``."""
        if self.cpu_free[node] < task.cpu_milli or self.mem_free[node] < task.memory_mib:
            return False
        if len(gpus) != task.num_gpu or len(set(gpus)) != len(gpus):
            return False
        if task.num_gpu and task.gpu_models:
            model = self.models[self.model_idx[node]] if self.model_idx[node] >= 0 else ""
            if model not in task.gpu_models:
                return False
        return all(0 <= g < self.max_gpus and self.gpu_free[node, g] >= task.gpu_milli for g in gpus)

    def place(self, node: int, task: TaskShape, gpus: tuple[int, ...]) -> Placement:
        """Take ``task``'s resources on ``node``.  Raises ``ValueError`` rather than over-commit."""
        if not self.fits(node, task, gpus):
            raise ValueError(f"{task} does not fit on node {self.names[node]} with GPUs {gpus}")
        self.cpu_free[node] -= task.cpu_milli
        self.mem_free[node] -= task.memory_mib
        for g in gpus:
            self.gpu_free[node, g] -= task.gpu_milli
        if task.affinity_class >= 0:
            self.affinity[node, task.affinity_class] += 1
        self.version[node] = self._digest(node)
        return Placement(node=node, gpus=gpus, task=task)

    def remove(self, placement: Placement) -> None:
        """Give a placement's resources back; the node returns exactly to its earlier free state."""
        node, task = placement.node, placement.task
        if self.cpu_free[node] + task.cpu_milli > self.cpu_cap[node] or (
            self.mem_free[node] + task.memory_mib > self.mem_cap[node]
        ):
            raise ValueError(f"removing {placement} would exceed node capacity")
        for g in placement.gpus:
            if self.gpu_free[node, g] + task.gpu_milli > self.gpu_cap[node, g]:
                raise ValueError(f"removing {placement} would exceed GPU {g} capacity")
        self.cpu_free[node] += task.cpu_milli
        self.mem_free[node] += task.memory_mib
        for g in placement.gpus:
            self.gpu_free[node, g] += task.gpu_milli
        if task.affinity_class >= 0:
            self.affinity[node, task.affinity_class] -= 1
        self.version[node] = self._digest(node)

    def _digest(self, node: int) -> int:
        state = (
            int(self.cpu_free[node]),
            int(self.mem_free[node]),
            *self.gpu_free[node].tolist(),
            *self.affinity[node].tolist(),
        )
        return hash(state) & 0x7FFF_FFFF_FFFF_FFFF  # ints hash to themselves: stable across runs

    def free_state(self, node: int) -> tuple[int, int, tuple[int, ...]]:
        """The node's free (cpu, memory, per-GPU) resources, for tests and reports."""
        gpus = tuple(int(x) for x in self.gpu_free[node, : self.gpu_count[node]])
        return int(self.cpu_free[node]), int(self.mem_free[node]), gpus


def first_free_gpus(gpu_free_row: IntArray, count: int) -> tuple[int, ...]:
    """The lowest-indexed ``count`` fully free GPU slots of one node (how whole GPUs are handed out)."""
    free = np.flatnonzero(gpu_free_row == MILLI)
    if free.size < count:
        raise ValueError(f"only {free.size} whole GPUs free, {count} needed")
    return tuple(int(g) for g in free[:count])


DEDUP_MIN_NODES = 64
"""Below this many nodes :func:`distinct_states` returns them as they are (its sort costs ~80 us)."""


def distinct_states(cluster: ClusterState, nodes: IntArray) -> tuple[IntArray, IntArray]:
    """Nodes of ``nodes`` with pairwise different (version digest, GPU model), and where each went.

    Returns ``(reps, which)``: ``reps`` ascending node indices, one per distinct state, and for
    every entry of ``nodes`` the position in ``reps`` of the node sharing its state, so
    ``values_of(reps)[which]`` equals ``values_of(nodes)`` for any per-node function of the
    node's free resources and model.  (The digest covers CPU, memory, every GPU slot in order
    and the task counts; see ``ClusterState``.)
    """
    if nodes.size < DEDUP_MIN_NODES:
        return nodes, np.arange(nodes.size)  # a handful (one placement's worth): not worth a sort
    # One 64-bit key per node instead of a 2-column unique (several times slower): the model
    # index spread by an odd constant, xor the digest.  Distinct pairs collide with odds of the
    # digests' own (2^-63), and equal pairs always agree, so the grouping is the pairs'.
    keys = cluster.version[nodes] ^ (cluster.model_idx[nodes] * np.int64(0x9E3779B97F4A7C15 - 2**64))
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first)  # representatives in ascending node order, as scorers expect
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return nodes[first[order]], rank[inverse.reshape(-1)]
