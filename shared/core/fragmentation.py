"""GPU fragmentation as the FGD paper defines it, vectorised over many node states at once.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC '23).  For a node and a target workload of typical task shapes with
popularities p_m, the node's fragmentation is

    F_n = sum_m p_m * F_n(m)

where F_n(m), in milli-GPU, is

* all of the node's idle GPU share when task m cannot run there at all: it needs no GPU (a CPU
  task leaves every idle GPU idle), the GPU model does not match, the node lacks the CPU, or no
  set of its GPUs can hold m;
* otherwise the idle share on those GPUs whose free share is smaller than m's per-GPU request
  (they can never serve m).

The cluster's fragmentation is the sum over nodes.  Only CPU and GPU enter the definition (not
memory), as in the paper's artifact, so reported figures are comparable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from shared.core.cluster import ClusterState, IntArray, distinct_states
from shared.core.task import MILLI, TaskShape

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TypicalWorkload:
    """Typical task shapes (CPU, per-GPU milli, GPU count, models) and their popularity (sum 1).

    ``from_tasks`` follows the paper artifact: count each distinct shape, keep the most popular
    ones until they cover ``coverage`` of all tasks (CPU-only tasks included), renormalise.
    ``gpu_weight`` > 0 weighs a whole-GPU shape by ``1 + gpu_weight * num_gpu`` instead of 1.
    """

    cpu: IntArray
    gpu_milli: IntArray
    num_gpu: IntArray
    models: tuple[tuple[str, ...], ...]
    freq: FloatArray
    complete: TypicalWorkload | None = field(default=None, compare=False, repr=False)
    """Every shape of the source tasks (coverage 1), for views that must see rare large tasks."""
    _access: dict[tuple[str, ...], npt.NDArray[np.bool_]] = field(default_factory=dict, compare=False)

    @classmethod
    def from_tasks(
        cls, tasks: Iterable[TaskShape], coverage: float = 0.95, gpu_weight: float = 0.0
    ) -> TypicalWorkload:
        counts: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter()
        for t in tasks:
            weight = 1.0 + gpu_weight * t.num_gpu if gpu_weight > 0 and t.gpu_milli == MILLI else 1.0
            counts[(t.cpu_milli, t.gpu_milli, t.num_gpu, t.gpu_models)] += weight  # type: ignore[assignment]
        if not counts:
            raise ValueError("a typical workload needs at least one task")
        total = float(sum(counts.values()))
        # Most popular first; equal counts ordered by the shape itself so the cut is deterministic.
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept: list[tuple[tuple[int, int, int, tuple[str, ...]], float]] = []
        covered = 0.0
        for shape, count in ranked:
            kept.append((shape, count))
            covered += count
            if covered >= coverage * total:
                break
        complete = cls.from_shapes(list(ranked)) if len(kept) < len(ranked) else None
        cut = cls.from_shapes(kept)
        return cls(cut.cpu, cut.gpu_milli, cut.num_gpu, cut.models, cut.freq, complete=complete)

    @classmethod
    def from_shapes(
        cls, shapes: list[tuple[tuple[int, int, int, tuple[str, ...]], float]]
    ) -> TypicalWorkload:
        weights = np.array([w for _, w in shapes], dtype=np.float64)
        return cls(
            cpu=np.array([s[0] for s, _ in shapes], dtype=np.int64),
            gpu_milli=np.array([s[1] for s, _ in shapes], dtype=np.int64),
            num_gpu=np.array([s[2] for s, _ in shapes], dtype=np.int64),
            models=tuple(s[3] for s, _ in shapes),
            freq=weights / weights.sum(),
        )

    def __len__(self) -> int:
        return int(self.freq.size)

    def access(self, cluster_models: tuple[str, ...]) -> npt.NDArray[np.bool_]:
        """(len(cluster_models), T) mask: may typical task t run on a GPU of model i."""
        cached = self._access.get(cluster_models)
        if cached is None:
            cached = np.array(
                [[not ms or m in ms for ms in self.models] for m in cluster_models], dtype=np.bool_
            ).reshape(len(cluster_models), len(self.models))
            self._access[cluster_models] = cached
        result: npt.NDArray[np.bool_] = cached
        return result


class FragmentationModel:
    """Computes F_n for batches of node states against one typical workload on one cluster."""

    def __init__(
        self, workload: TypicalWorkload, cluster_models: tuple[str, ...], conditional: bool = False
    ) -> None:
        gpu = workload.num_gpu > 0
        self.cpu_only_freq = float(workload.freq[~gpu].sum())
        self.t_cpu = workload.cpu[gpu]
        self.t_num = workload.num_gpu[gpu]
        self.t_freq = workload.freq[gpu]
        milli = workload.gpu_milli[gpu]
        self.thresholds, self.t_thr = np.unique(milli, return_inverse=True)
        self.t_gpu: IntArray = self.thresholds[self.t_thr] * self.t_num  # milli-GPU per task
        access = workload.access(cluster_models)[:, gpu]
        # Row -1 (index len) stands for "no GPU model": nothing GPU-bound can run there.
        self.access = np.vstack([access, np.zeros((1, access.shape[1]), dtype=np.bool_)])
        # Per GPU model, the weight of each GPU shape.  FGD's: its popularity everywhere (a shape
        # that may not use the model counts the whole idle GPU).  Conditional: only the shapes
        # that may use the model, their popularities rescaled to the same total, so a node's
        # value no longer depends on how many shapes are barred from it (see TesseraScorer).
        # Where every shape may use every model the two are equal, and FGD's arithmetic (a matrix
        # product) is kept so the figures of unconstrained traces stay exactly what they were.
        self.conditional = conditional and not bool(access.all())
        weights = np.where(self.access, self.t_freq[None, :], 0.0)
        if self.conditional:
            mass = weights.sum(axis=1, keepdims=True)
            weights = np.where(mass > 0, weights * (self.t_freq.sum() / np.maximum(mass, 1e-300)), 0.0)
        self.weights = weights

    def frag(self, cpu_free: IntArray, gpu_free: IntArray, model_idx: IntArray) -> FloatArray:
        """F_n in milli-GPU for each of K node states: cpu_free (K,), gpu_free (K, G), model (K,)."""
        total = gpu_free.sum(axis=1).astype(np.float64)
        result: FloatArray = self.cpu_only_freq * total
        if self.t_freq.size == 0:
            return result
        ge = gpu_free[:, :, None] >= self.thresholds[None, None, :]
        count = ge.sum(axis=1)
        usable = (gpu_free[:, :, None] * ge).sum(axis=1)
        small = total[:, None] - usable  # idle share on GPUs too small for the threshold
        ok = count[:, self.t_thr] >= self.t_num[None, :]
        ok &= cpu_free[:, None] >= self.t_cpu[None, :]
        ok &= self.access[model_idx]
        contrib = np.where(ok, small[:, self.t_thr], total[:, None])
        if not self.conditional:
            frag: FloatArray = result + contrib @ self.t_freq
            return frag
        weighted: FloatArray = result + (contrib * self.weights[model_idx]).sum(axis=1)
        return weighted

    def fits(self, cpu_free: IntArray, gpu_free: IntArray, model_idx: IntArray) -> IntArray:
        """(K, T): how many tasks of each typical GPU shape each of K node states could still take,
        by its GPUs (``floor(free / request)`` per GPU for a share, whole free GPUs for whole-GPU
        tasks), its CPU and its GPU model (memory is not counted, as everywhere in this module)."""
        per_gpu = gpu_free[:, :, None] // self.thresholds[None, None, :]
        k_gpu = per_gpu.sum(axis=1)[:, self.t_thr] // self.t_num[None, :]
        k_cpu = cpu_free[:, None] // np.maximum(self.t_cpu, 1)[None, :]
        k: IntArray = np.minimum(k_gpu, k_cpu) * self.access[model_idx]
        return k

    def packing_frag(self, cpu_free: IntArray, gpu_free: IntArray, model_idx: IntArray) -> FloatArray:
        """Idle milli-GPU left over if the node were filled with tasks of each typical shape.

        Per shape m: the node takes ``k = min(tasks its GPUs hold, cpu_free // cpu_m)`` tasks
        (``floor(free / request)`` per GPU for a share, whole free GPUs for whole-GPU tasks), and
        ``idle - k * request`` is lost to m.  Popularity-weighted like :meth:`frag`, over the GPU
        shapes only: CPU-only shapes, which lose every idle GPU, are already counted by :meth:`frag`.
        """
        total = gpu_free.sum(axis=1).astype(np.float64)
        if self.t_freq.size == 0:
            return np.zeros_like(total)
        usable = self.fits(cpu_free, gpu_free, model_idx) * self.t_gpu[None, :]
        if not self.conditional:
            packed: FloatArray = (total[:, None] - usable) @ self.t_freq
            return packed
        weighted: FloatArray = ((total[:, None] - usable) * self.weights[model_idx]).sum(axis=1)
        return weighted


class NodeFragmentation:
    """Each node's current F_n, refreshed only for nodes whose version moved since last asked."""

    def __init__(self, model: FragmentationModel, cluster: ClusterState) -> None:
        self.model = model
        self.values = np.zeros(cluster.size, dtype=np.float64)
        self._version = np.full(cluster.size, -1, dtype=np.int64)

    def evaluate(self, cluster: ClusterState, nodes: IntArray) -> FloatArray:
        """The per-node value kept current; FGD's fragmentation unless a subclass says otherwise."""
        return self.model.frag(cluster.cpu_free[nodes], cluster.gpu_free[nodes], cluster.model_idx[nodes])

    def current(self, cluster: ClusterState) -> FloatArray:
        stale = np.flatnonzero(self._version != cluster.version)
        if stale.size:
            reps, which = distinct_states(cluster, stale)
            self.values[stale] = self.evaluate(cluster, reps)[which]
            self._version[stale] = cluster.version[stale]
        return self.values


def after_states(
    cluster: ClusterState, nodes: IntArray, task: TaskShape
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """Node states after placing ``task`` on each of ``nodes``.

    Returns (cpu, gpu, model, owner, slot).  For a shared task every node contributes one state per
    GPU slot that can hold it: ``owner`` maps each state back to its position in ``nodes`` (in
    ascending order) and ``slot`` names the GPU it used.  Other tasks give exactly one state per
    node (whole GPUs are taken from the lowest free slots, as the placement does) and ``slot`` -1.
    """
    cpu = cluster.cpu_free[nodes] - task.cpu_milli
    gpu = cluster.gpu_free[nodes].copy()
    model = cluster.model_idx[nodes]
    one_each = np.arange(nodes.size)
    no_slot = np.full(nodes.size, -1, dtype=np.int64)
    if task.num_gpu == 0:
        return cpu, gpu, model, one_each, no_slot
    if not task.is_shared:
        free = gpu == MILLI
        take = free & (np.cumsum(free, axis=1) <= task.num_gpu)
        gpu[take] = 0
        return cpu, gpu, model, one_each, no_slot
    owner, slot = np.nonzero(gpu >= task.gpu_milli)
    states = gpu[owner].copy()
    states[np.arange(owner.size), slot] -= task.gpu_milli
    return cpu[owner], states, model[owner], owner, slot.astype(np.int64)
