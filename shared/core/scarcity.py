"""Shape scarcity: what a placement costs the task shapes that only a few places can still hold.

FGD weighs a shape's fragmentation by its popularity alone, so a shape that is rare but can run
on only a few nodes hardly counts: on the openb default trace the 8-GPU, 120-core pods (5 of
8,152) fit only the 39 nodes with 128 cores, and a 1-GPU pod that lands on one of them costs
FGD's measure about 4 milli-GPU.  Placer after placer takes those nodes for pods that could have
gone anywhere, and large pods fail long before the cluster is full (FGD and Tessera alike;
Tessera, which packs harder, earlier: at a median 90.6% arrived load against FGD's 95.7%).

The expected number of pods of shape ``s`` that fail for want of room is ``E[(N_s - K_s)+]``,
where ``K_s`` is how many tasks of ``s`` the cluster can still take (its *slots*, summed over
nodes) and ``N_s`` how many will still come.  Taking one slot away raises it by
``P(N_s >= K_s)``, so a placement that destroys slots of ``s`` costs

    sum over s of  P(N_s >= K_s) x (slots of s it destroys) x (GPU of one task of s)

in milli-GPU, the unit of the scorer's other terms.  ``N_s`` is Poisson with mean ``p_s x H``:
``p_s`` the shape's popularity, ``H`` the pods it takes to use up the free GPUs or the free CPUs,
whichever runs out first, at what the workload's mean pod takes of each (no more pods can be
placed once the cluster is full).  While slots are plentiful the cost is zero (``P`` is
negligible), so on most placements nothing changes; it grows as a shape's last slots go, and it
is the slot holders' *scarcity*, not the shape's popularity, that sets it.  The slots a task
takes for its own shape are not a cost: they are used, not destroyed.

Shapes that compete for the very same slots are one pool.  The default trace's 8-GPU pods of
120 and of 120.2 cores are two typical shapes, and each fits once on each of the 39 nodes with
128 cores and nowhere else: a pod of either takes the node's one slot of both.  Counted apart,
each shape's demand was set against the full count of slots: on multigpu50-g2 (seed 48, 30%
arrived) 16 and 12 pods to come, each against 27 slots, so P(N >= K) was below 1%, and a
4-GPU, 60-core pod took a 128-core node for a tighter pack; together 28 pods come for 27 slots.
So shapes that ask the same GPUs and fit at most once per node, on the same nodes, form one pool
(:func:`equivalent_shapes`), whose first shape carries its demand and its cost, once.  That is
Hall's condition where two shapes' slot sets are the same; shapes whose slot sets only nest
(an 88-core 8-GPU pod also fits the 128-core nodes, and more) are kept apart
(docs/results/default/history.md says why).
"""

from __future__ import annotations

import math

import numpy as np

from shared.core.cluster import ClusterState, IntArray
from shared.core.fragmentation import FloatArray, FragmentationModel, TypicalWorkload
from shared.core.task import TaskShape

NEGLIGIBLE = 1e-3
"""A slot-loss probability below this counts as zero: the term then costs less than one milli-GPU
for an 8-GPU shape, and the shape is skipped (the common case: nothing is scarce)."""
LOG_NEGLIGIBLE = math.log(NEGLIGIBLE)


def poisson_tails(means: FloatArray, ks: IntArray) -> FloatArray:
    """P(N >= k) for N Poisson with each mean, per (mean, k) pair, all at once."""
    out = np.ones(means.size, dtype=np.float64)
    some = ks > 0
    if not some.any():
        return out
    i = np.arange(int(ks.max()))
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, max(1, i.size))))])[: i.size]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = -means[:, None] + i[None, :] * np.log(means)[:, None] - log_fact[None, :]
    pmf = np.where(means[:, None] > 0, np.exp(log_pmf), (i == 0)[None, :].astype(np.float64))
    below = np.where(i[None, :] < ks[:, None], pmf, 0.0).sum(axis=1)
    result: FloatArray = np.where(some, np.maximum(0.0, 1.0 - below), 1.0)
    return result


def equivalent_shapes(model: FragmentationModel, cluster: ClusterState) -> IntArray:
    """Per typical GPU shape, the first shape of its pool: the shapes that take exactly the same
    slots as it, so that a task of any of them uses up one slot of every one.

    Two shapes are in one pool if they ask the same GPUs, fit equally often on every empty node,
    and at most once: then no node holds one task of each (it would need the GPUs of two, and
    the CPU of two of the smaller), so a task placed takes the node's one slot of both.  Shapes
    that ask the same CPU as well fit equally often in every state wherever both accept the GPU
    model, so equal counts on empty nodes put them in one pool at any count."""
    empty = model.fits(cluster.cpu_cap, cluster.gpu_cap, cluster.model_idx)
    first: dict[tuple[object, ...], int] = {}
    rep = np.arange(model.t_freq.size, dtype=np.int64)
    for t in range(rep.size):
        column = empty[:, t]
        key: tuple[object, ...] = (int(model.t_thr[t]), int(model.t_num[t]), column.tobytes())
        if column.size and int(column.max()) > 1:
            key = (int(model.t_cpu[t]), *key)
        rep[t] = first.setdefault(key, t)
    return rep


class ShapeScarcity:
    """Slots per node and typical GPU shape, kept current by node version, and the cost per slot."""

    def __init__(self, model: FragmentationModel, workload: TypicalWorkload, cluster: ClusterState) -> None:
        """``model`` must be built from ``workload`` (its GPU shapes in the workload's order)."""
        self.model = model
        self.freq = model.t_freq  # popularity among all tasks (CPU-only ones included)
        # Shapes with equal slots are one pool: its first shape carries the pool's popularity.
        self.rep = equivalent_shapes(model, cluster)
        self.pooled: FloatArray = np.bincount(self.rep, weights=self.freq, minlength=self.freq.size).astype(
            np.float64
        )
        self.gpu = model.t_gpu.astype(np.float64)
        # What the mean pod takes (CPU-only pods included): the cluster is full when either runs out.
        self._gpu_per_pod = float((workload.freq * workload.num_gpu * workload.gpu_milli).sum())
        self._cpu_per_pod = float((workload.freq * workload.cpu).sum())
        self.slots: IntArray = np.zeros((cluster.size, self.freq.size), dtype=np.int64)
        self.supply: IntArray = np.zeros(self.freq.size, dtype=np.int64)
        self._version = np.full(cluster.size, -1, dtype=np.int64)
        models = [workload.models[i] for i in np.flatnonzero(workload.num_gpu > 0).tolist()]
        self._shapes = {
            (int(model.t_cpu[t]), int(model.thresholds[model.t_thr[t]]), int(model.t_num[t]), models[t]): t
            for t in range(self.freq.size)
        }

    def refresh(self, cluster: ClusterState) -> None:
        stale = np.flatnonzero(self._version != cluster.version)
        if stale.size == 0:
            return
        rows = self.model.fits(cluster.cpu_free[stale], cluster.gpu_free[stale], cluster.model_idx[stale])
        self.supply += rows.sum(axis=0) - self.slots[stale].sum(axis=0)
        self.slots[stale] = rows
        self._version[stale] = cluster.version[stale]

    def costs(self, cluster: ClusterState) -> FloatArray:
        """Milli-GPU per destroyed slot of each typical shape now (0 where slots are plentiful)."""
        self.refresh(cluster)
        out = np.zeros(self.freq.size, dtype=np.float64)
        if self._gpu_per_pod <= 0:
            return out
        horizon = float(cluster.gpu_free.sum()) / self._gpu_per_pod
        if self._cpu_per_pod > 0:
            horizon = min(horizon, float(cluster.cpu_free.sum()) / self._cpu_per_pod)
        means = self.pooled * horizon  # 0 for a pool's other shapes: their cost is the first's
        # Only shapes whose tail may reach NEGLIGIBLE, by the Chernoff bound
        # P(N >= k) <= exp(-m) (e m / k)^k for k > m (skipping the others changes no cost); a
        # shape without a slot left has nothing to lose.
        k = self.supply.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_bound = np.where(k > means, k - means + k * np.log(means / np.maximum(k, 1.0)), 0.0)
        near = np.flatnonzero((self.supply > 0) & (means > 0) & (log_bound >= LOG_NEGLIGIBLE))
        if near.size:
            tails = poisson_tails(means[near], self.supply[near])
            out[near] = np.where(tails >= NEGLIGIBLE, tails * self.gpu[near], 0.0)
        return out

    def own(self, task: TaskShape) -> int:
        """The pool ``task`` takes its slot from (its typical shape's first equal; -1: none):
        that slot is used, not destroyed."""
        t = self._shapes.get((task.cpu_milli, task.gpu_milli, task.num_gpu, task.gpu_models), -1)
        return int(self.rep[t]) if t >= 0 else -1

    def loss(
        self,
        cost: FloatArray,
        nodes: IntArray,
        cpu: IntArray,
        gpu: IntArray,
        mdl: IntArray,
        own: int,
    ) -> FloatArray:
        """Milli-GPU of scarce slots lost by moving ``nodes`` to the after-states given."""
        scarce = np.flatnonzero(cost)
        after = self.model.fits(cpu, gpu, mdl)[:, scarce]
        lost = self.slots[nodes][:, scarce] - after
        if own >= 0:
            mine = np.flatnonzero(scarce == own)
            if mine.size:
                lost[:, mine[0]] -= 1  # the slot the task itself takes
        result: FloatArray = np.maximum(lost, 0) @ cost[scarce]
        return result
