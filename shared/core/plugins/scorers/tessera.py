"""Score: Tessera's default policy — fragmentation-, packing- and CPU-aware, with stable packing ties.

FGD (Weng et al., ATC '23) asks "after this placement, how much idle GPU can the *next* typical
task not use?".  On the openb traces what it still loses is GPU that later tasks could have used
but for two reasons FGD's one-task view misses:

1. **Leftover shares and rare large tasks.**  A fresh GPU holding one 470m task keeps 530m that
   FGD counts as usable by a 470m task, but after that second task 60m is lost for good.  The
   *packing* view fills the node with as many tasks of each shape as its GPUs
   (``floor(free / request)`` per GPU) and its CPU (``floor(cpu_free / cpu)``) allow, and counts
   the GPU share that would still be idle.  It sees the stranded remainder early and, because CPU
   caps the count, also GPUs that will never be used because the node's CPU runs out first.  It
   counts every task shape, not only the 95% most popular FGD keeps, so the rare 8-GPU, 120-core
   task still sees the few nodes that can hold it: without that, such tasks failed from 3%
   arrived load on.
2. **CPU starvation.**  CPU-only pods have no GPU in FGD's measure, so FGD places them wherever
   fragmentation does not move, often on GPU-dense nodes whose cores their GPUs need.  The
   *stranding* term charges a placement for idle GPU left without CPU, at the workload's own
   CPU-per-GPU ratio: ``max(0, gpu_free - cpu_free / ratio)``.

3. **Only the shapes that may use a node count there** (``conditional``).  FGD counts all of a
   node's idle GPU as fragmented for every shape barred from its GPU model, so the fewer shapes
   may use a node, the larger the drop in "fragmentation" when anything fills it: the measure
   pulls unconstrained pods onto the very nodes that the pods restricted to that model are
   waiting for (on traces where a third of the GPU pods name models, FGD and the earlier Tessera
   filled the V100 and T4 pools with pods that could have run anywhere, and the constrained
   pods failed).  Tessera weighs each node's fragmentation by the popularity of the shapes that
   may use its model, rescaled to the same total, so a node's value says how well *its* users
   can use it and no longer how many others are barred.  Where every shape may use every model
   (the openb traces as published) the weights are FGD's and nothing changes.

4. **Pool pressure** (``pressure_weight``).  Removing FGD's bias leaves every pool equal for a pod
   that may go anywhere, but they are not: a pool whose pinned pods need most of it (the V100s
   when a fifth of the GPU pods ask for V100s) should be the last choice of a pod that can run
   elsewhere.  A placement on a node of model i costs its GPU request times the pool's
   pressure (``pool_pressure``: pinned demand per GPU of i over the workload's demand per GPU,
   at most 1): the expected share of that GPU the pinned pods will want.  It is in milli-GPU
   like the other terms, so its weight is 1; without pinned shapes it is 0 everywhere.

5. **Shape scarcity** (``scarcity``, ``shared/core/scarcity.py``).  Popularity says how often a
   shape comes, not how few places can still hold it: the 8-GPU, 120-core pods of openb fit only
   the 39 nodes with 128 cores, and shared pods took those nodes on ties (every empty node scored
   alike) until large pods failed long before the cluster was full.  A placement now also
   costs, per shape, the slots it destroys times the chance that the shape's remaining slots
   will not be enough (``P(N_s >= K_s)``, Poisson arrivals until the cluster is full) times its
   GPU.  While slots are plentiful the cost is zero and nothing changes.

6. **Shares judged without the 1-GPU whole-GPU tasks** (``share_view``).  FGD counts a GPU that
   a share opens as lost to every 1-GPU whole-GPU shape, so a share always took the hole beside
   another share, however badly the two pair (a 320m task beside a 470m one leaves 210m that
   almost nothing can use).  Such tasks can use any whole GPU, whole GPUs run short only at the
   end, and shape scarcity charges for them then, so a shared task's FGD and packing views leave
   them out (``sharing_shapes``); multi-GPU and model-pinned shapes stay, since their room runs
   short long before the cluster's.  The premise fails while work that needs whole GPUs waits
   (a busy cluster in steady state): whole GPUs are short *now*.  So the view holds only in a
   cycle whose snapshot has no such job pending from before the cycle's time (``begin_cycle``);
   otherwise shares are judged by the full view, as FGD judges them.  The fill protocol never
   has a backlog, so there the view always holds.

7. **Pairing by the fluid packing** (``pairing``, ``shared/core/pairing.py``).  The LP packing of
   the workload's shares says which shares a clairvoyant placer puts together; a shared task
   costs the change in the final waste of the pattern its GPU is on the way to.

The score is ``-(dF_fgd + packing_weight * dF_packing + cpu_weight * dS + pressure + scarcity
+ pairing)``
in milli-GPU, banded like kube-scheduler's integer scores (``floor(100 * sigmoid(value / band))``).
The banding is deliberate: near-equal choices tie, and ties go to the first node in a stable order,
which packs work onto the same nodes and keeps others whole for large tasks — exact scores spread
work and lose about four points of allocation on the default trace.  For a shared task the GPU is the one
with the best banded score and, among those, the least share left (``gpu_fit_weight`` < 1 point).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from shared.core.cluster import ClusterState, IntArray
from shared.core.fragmentation import (
    FloatArray,
    FragmentationModel,
    NodeFragmentation,
    TypicalWorkload,
    after_states,
)
from shared.core.framework import Scores
from shared.core.jobs import Job
from shared.core.node_cache import NodeValueCache
from shared.core.pairing import pairing_table
from shared.core.plugins.scorers.fgd import best_per_node
from shared.core.scarcity import ShapeScarcity
from shared.core.task import MILLI, TaskShape

NAME = "tessera"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    workload: TypicalWorkload
    packing_weight: float = Field(1.0, ge=0, description="weight of the fill-the-node fragmentation view")
    cpu_weight: float = Field(1.0, ge=0, description="weight of idle GPU stranded without CPU")
    band: float = Field(
        1000.0, gt=0, description="milli-GPU per sigmoid unit: wider bands tie more, pack more"
    )
    gpu_fit_weight: float = Field(0.9, ge=0, lt=1, description="tie-break (score points) to the tightest GPU")
    conditional: bool = Field(
        True, description="weigh each node's fragmentation by the shapes that may use its GPU model only"
    )
    pressure_weight: float = Field(
        1.0, ge=0, description="weight of the demand that pods pinned to a GPU model put on its pool"
    )
    scarcity: bool = Field(
        True, description="charge a placement for the slots it destroys of shapes few nodes can still hold"
    )
    share_view: bool = Field(
        True,
        description=(
            "judge a shared task without the 1-GPU whole-GPU shapes that may run anywhere, "
            "except in a cycle where a job needing whole GPUs has been waiting"
        ),
    )
    pairing: bool = Field(
        True,
        description="charge a shared task for steering its GPU off the fluid packing's share patterns",
    )


def cpu_per_gpu_milli(workload: TypicalWorkload) -> float:
    """Milli-CPU the typical GPU task brings per milli-GPU (popularity-weighted)."""
    gpu = workload.num_gpu > 0
    demand = float((workload.freq[gpu] * workload.num_gpu[gpu] * workload.gpu_milli[gpu]).sum())
    if demand == 0:
        return float("inf")
    return float((workload.freq[gpu] * workload.cpu[gpu]).sum()) / demand


def pool_pressure(workload: TypicalWorkload, cluster: ClusterState) -> FloatArray:
    """Per GPU model (and a last entry 0 for nodes without GPUs): how much of the pool the pods
    pinned to it need, relative to the cluster's demand per GPU, at most 1.

    Each GPU shape that names models spreads its GPU demand (popularity x GPUs) over them in
    proportion to their GPUs; a pool's pinned demand per GPU, over the whole workload's demand
    per GPU, says how much of each of its GPUs the pinned pods will want.  Unconstrained shapes
    add nothing: they can go anywhere.  0 everywhere when no shape names a model.
    """
    models = cluster.models
    cap = cluster.gpus_per_model()
    access = workload.access(models)
    pinned = np.zeros(len(models))
    total = 0.0
    for k in range(len(workload)):
        if workload.num_gpu[k] == 0:
            continue
        volume = float(workload.freq[k] * workload.num_gpu[k] * workload.gpu_milli[k])
        total += volume
        allowed = access[:, k]
        if not workload.models[k] or not allowed.any() or cap[allowed].sum() == 0:
            continue
        pinned += np.where(allowed, volume * cap / cap[allowed].sum(), 0.0)
    if total == 0 or cap.sum() == 0:
        return np.zeros(len(models) + 1)
    density = np.divide(pinned, cap, out=np.zeros_like(pinned), where=cap > 0) / (total / cap.sum())
    result: FloatArray = np.append(np.minimum(1.0, density), 0.0)
    return result


def sharing_shapes(workload: TypicalWorkload) -> TypicalWorkload | None:
    """The shapes a shared task is judged by: all but the 1-GPU whole-GPU shapes that may use
    any model, at their popularity in the whole workload (not rescaled: the view's milli-GPU
    weigh as the full view's do).  ``None`` when no shape is left out (the view would be the full
    one) or no GPU shape is left.

    Such a task can use any whole GPU anywhere, and whole GPUs run short only at the end of a
    fill, when shape scarcity charges for them.  The others stay:

    * multi-GPU shapes need several whole GPUs on one node, and a share that opens a GPU on an
      empty node takes that slot at once (left out, ``multigpu80-g2`` lost 0.55 points at @100:
      the multi-GPU pods that came last found no node with room);
    * whole-GPU shapes pinned to models: their pool can run out of whole GPUs long before the
      cluster does, and scarcity, which counts each shape against its own slots, sees that late
      when pinned shapes of several CPU sizes share a pool (left out, G2-pinned whole-GPU pods
      failed from 93% arrived load on, on ``gpuspec25-g3``).
    """
    pinned = np.array([bool(m) for m in workload.models], dtype=np.bool_)
    keep = (workload.gpu_milli < MILLI) | pinned | (workload.num_gpu > 1)
    if keep.all() or not (keep & (workload.num_gpu > 0)).any():
        return None
    return TypicalWorkload(
        cpu=workload.cpu[keep],
        gpu_milli=workload.gpu_milli[keep],
        num_gpu=workload.num_gpu[keep],
        models=tuple(m for m, k in zip(workload.models, keep, strict=True) if k),
        freq=workload.freq[keep],
    )


def stranded_gpu(cpu_free: IntArray, gpu_free_total: IntArray, ratio: float) -> FloatArray:
    """Idle milli-GPU that the node's free CPU cannot feed at ``ratio`` milli-CPU per milli-GPU."""
    if not 0 < ratio < float("inf"):
        return np.zeros(gpu_free_total.shape, dtype=np.float64)  # GPU work needs no CPU: none strands
    result: FloatArray = np.maximum(0.0, gpu_free_total - cpu_free / ratio)
    return result


@dataclass
class TesseraScorer:
    workload: TypicalWorkload
    packing_weight: float = 1.0
    cpu_weight: float = 1.0
    band: float = 1000.0
    gpu_fit_weight: float = 0.9
    conditional: bool = True
    pressure_weight: float = 1.0
    scarcity: bool = True
    share_view: bool = True
    pairing: bool = True
    name: str = NAME
    _state: tuple[FragmentationModel, NodeFragmentation, NodeValueCache, float] | None = field(
        default=None, init=False, repr=False
    )
    _packing_model: FragmentationModel | None = field(default=None, init=False, repr=False)
    _pressure: FloatArray | None = field(default=None, init=False, repr=False)
    _scarcity: ShapeScarcity | None = field(default=None, init=False, repr=False)
    _pairing: FloatArray | None = field(default=None, init=False, repr=False)
    _shares: tuple[FragmentationModel, FragmentationModel, NodeFragmentation, NodeValueCache] | None = field(
        default=None, init=False, repr=False
    )
    _whole_gpus_wanted: bool = field(default=False, init=False, repr=False)

    def begin_cycle(self, pending: Sequence[Job], now: float) -> None:
        """Whole GPUs are short while a job that needs them waits: one pending since before
        ``now`` turns the share view off for this cycle (``framework.ReadsBacklog``)."""
        viewless = self._state is not None and self._shares is None  # bound, no share view
        self._whole_gpus_wanted = (
            self.share_view
            and not viewless
            and any(j.shape.num_gpu > 0 and not j.shape.is_shared and j.since < now for j in pending)
        )

    def _bind(
        self, cluster: ClusterState
    ) -> tuple[FragmentationModel, NodeFragmentation, NodeValueCache, float]:
        if self._state is None:
            model = FragmentationModel(self.workload, cluster.models, self.conditional)
            every = self.workload.complete or self.workload
            # The packing view sees every shape, rare large ones too (FGD's view keeps the cut).
            self._packing_model = FragmentationModel(every, cluster.models, self.conditional)
            self._state = (
                model,
                _Combined(self, model, self._packing_model, cluster),
                NodeValueCache(cluster.size),
                cpu_per_gpu_milli(self.workload),
            )
            if self.scarcity:
                self._scarcity = ShapeScarcity(self._packing_model, every, cluster)
            pressure = pool_pressure(every, cluster)
            self._pressure = self.pressure_weight * pressure if pressure.any() else None
            if self.pairing:
                self._pairing = pairing_table(every, cluster.models, cluster.gpus_per_model())
            cut = sharing_shapes(self.workload) if self.share_view else None
            complete = sharing_shapes(every) if cut is not None else None
            if cut is not None and complete is not None:
                share = FragmentationModel(cut, cluster.models, self.conditional)
                share_packing = FragmentationModel(complete, cluster.models, self.conditional)
                self._shares = (
                    share,
                    share_packing,
                    _Combined(self, share, share_packing, cluster),
                    NodeValueCache(cluster.size),  # a shape scored in both views: one cache each
                )
        return self._state

    def objective(
        self,
        model: FragmentationModel,
        ratio: float,
        cpu: IntArray,
        gpu: IntArray,
        mdl: IntArray,
        packing: FragmentationModel,
    ) -> FloatArray:
        """The quantity a placement should grow least, in milli-GPU, for K node states (``model``
        for FGD's view, ``packing`` for the fill-the-node view)."""
        value = model.frag(cpu, gpu, mdl)
        if self.packing_weight:
            value = value + self.packing_weight * packing.packing_frag(cpu, gpu, mdl)
        if self.cpu_weight:
            value = value + self.cpu_weight * stranded_gpu(cpu, gpu.sum(axis=1), ratio)
        return value

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores:
        model, now_state, cache, ratio = self._bind(cluster)
        packing = self._packing_model or model
        if task.is_shared and self._shares is not None and not self._whole_gpus_wanted:
            model, packing, now_state, cache = self._shares
        now = now_state.current(cluster)
        pressure = self._pressure
        scarcity = self._scarcity
        pairing = self._pairing if task.is_shared else None

        def compute(nodes: IntArray) -> tuple[FloatArray, IntArray]:
            # The cache keeps the raw delta of each node's chosen state; banding comes after the
            # scarcity term, which depends on the whole cluster and so cannot be cached per node.
            cpu, gpu, mdl, owner, slot = after_states(cluster, nodes, task)
            delta = self.objective(model, ratio, cpu, gpu, mdl, packing) - now[nodes][owner]
            if pressure is not None:
                delta = delta + task.total_gpu_milli * pressure[mdl]
            if pairing is not None:  # what the chosen GPU will finally waste, before and after
                after = MILLI - gpu[np.arange(owner.size), slot]
                delta = delta + pairing[mdl, after] - pairing[mdl, after - task.gpu_milli]
            if not task.is_shared:
                return delta, slot
            value = self._banded(delta)
            left = gpu[np.arange(owner.size), slot] / MILLI
            _, first = best_per_node(owner, value - self.gpu_fit_weight * left, nodes.size)
            return delta[first], slot[first]

        delta, gpu = cache.lookup(cluster, task, feasible, compute)
        if scarcity is not None:
            delta = delta + self._scarce_loss(scarcity, cluster, task, feasible, gpu)
        values = self._banded(delta)
        if task.is_shared:
            left = (cluster.gpu_free[feasible, gpu] - task.gpu_milli) / MILLI
            values = values - self.gpu_fit_weight * left
        return Scores(values=values, gpu=gpu if task.is_shared else None)

    def _banded(self, delta: FloatArray) -> FloatArray:
        banded: FloatArray = np.floor(100.0 / (1.0 + np.exp(delta / self.band)))
        return banded

    def _scarce_loss(
        self,
        scarcity: ShapeScarcity,
        cluster: ClusterState,
        task: TaskShape,
        feasible: IntArray,
        gpu: IntArray,
    ) -> FloatArray:
        """Milli-GPU of scarce shapes' slots each feasible node would lose (0 almost always)."""
        out = np.zeros(feasible.size, dtype=np.float64)
        cost = scarcity.costs(cluster)
        if not cost.any():
            return out
        # Nodes that hold a slot of a scarce shape (few shapes: select those columns first).
        holds = np.any(scarcity.slots[:, np.flatnonzero(cost)] > 0, axis=1)
        holders = np.flatnonzero(holds[feasible])
        if holders.size == 0:
            return out
        nodes = feasible[holders]
        cpu, after, mdl, owner, slot = after_states(cluster, nodes, task)
        if task.is_shared:  # one state per node: the GPU the cached choice took
            pick = np.flatnonzero(slot == gpu[holders][owner])
            cpu, after, mdl = cpu[pick], after[pick], mdl[pick]
        out[holders] = scarcity.loss(cost, nodes, cpu, after, mdl, scarcity.own(task))
        return out


class _Combined(NodeFragmentation):
    """Each node's current objective value, refreshed for nodes whose version moved."""

    def __init__(
        self,
        scorer: TesseraScorer,
        model: FragmentationModel,
        packing: FragmentationModel,
        cluster: ClusterState,
    ) -> None:
        super().__init__(model, cluster)
        self._scorer = scorer
        self._packing = packing
        self._ratio = cpu_per_gpu_milli(scorer.workload)

    def evaluate(self, cluster: ClusterState, nodes: IntArray) -> FloatArray:
        return self._scorer.objective(
            self.model,
            self._ratio,
            cluster.cpu_free[nodes],
            cluster.gpu_free[nodes],
            cluster.model_idx[nodes],
            self._packing,
        )


def build(args: Args) -> TesseraScorer:
    return TesseraScorer(
        workload=args.workload,
        packing_weight=args.packing_weight,
        cpu_weight=args.cpu_weight,
        band=args.band,
        gpu_fit_weight=args.gpu_fit_weight,
        conditional=args.conditional,
        pressure_weight=args.pressure_weight,
        scarcity=args.scarcity,
        share_view=args.share_view,
        pairing=args.pairing,
    )
