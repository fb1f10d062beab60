"""The plugin framework: filter and score extension points, statuses, and one placement decision.

Shaped after the Kubernetes scheduler framework, but vectorised: a filter returns a boolean mask
over all nodes and a scorer returns one score per feasible node, so one decision is a handful of
numpy operations instead of a Python loop per node.

Contracts:

* A filter is pure: it reads the cluster and the task and returns a mask; it never mutates.
* A scorer may keep caches, but only keyed by ``ClusterState.version`` so a stale value can never
  be used; given the same cluster, task and generator state it returns the same scores.
* Higher scores are better.  Ties go to the lowest node index: deterministic and stable.  The
  simulator reproduces the FGD artifact's node order (a seeded permutation, from the random name
  prefixes it gives nodes) by permuting the inventory, not by random tie-breaks.
* Expected outcomes are statuses, never exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shared.core.cluster import BoolArray, ClusterState, first_free_gpus
from shared.core.jobs import Job
from shared.core.task import TaskShape

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Code(StrEnum):
    """Outcome of scheduling one task (Kubernetes framework names)."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    """No node fits now; it may fit after something leaves."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """No node could ever fit, even empty."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    plugin: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


@runtime_checkable
class FilterPlugin(Protocol):
    """Removes nodes a task cannot run on.  Must be pure."""

    @property
    def name(self) -> str: ...

    def filter(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        """Mask over all nodes: True where the task fits as far as this filter is concerned."""
        ...

    def could_ever_fit(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        """The same test against empty nodes, to tell 'not now' from 'never'."""
        ...


@dataclass(frozen=True, slots=True)
class Scores:
    """Scores of the feasible nodes, in the order of the ``feasible`` index array given.

    ``gpu`` optionally names, per feasible node, the GPU slot a shared task should take there;
    scorers that have no opinion leave it ``None`` and the default best-fit GPU choice applies.
    """

    values: FloatArray
    gpu: IntArray | None = None


@runtime_checkable
class ScorePlugin(Protocol):
    """Ranks feasible nodes (higher is better) and may pick the GPU for a shared task."""

    @property
    def name(self) -> str: ...

    def score(
        self, cluster: ClusterState, task: TaskShape, feasible: IntArray, rng: np.random.Generator
    ) -> Scores: ...


@runtime_checkable
class ReadsBacklog(Protocol):
    """A scorer whose view depends on the work that waits, not only on the nodes.

    ``run_cycle`` calls ``begin_cycle`` once per cycle, before any stage places, with the
    snapshot's pending jobs and the cycle's time; the scorer keeps what it needs of them until the
    next call, so its scores stay a function of the cycle's inputs.  A caller that only calls
    ``decide`` (the fill protocol's pods, one at a time) never calls it: the scorer's view is then
    that of an empty backlog.
    """

    def begin_cycle(self, pending: Sequence[Job], now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a task goes, or why it cannot go anywhere."""

    status: Status
    node: int = -1
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Profile:
    """A named scheduling policy: the filters, then one scorer."""

    name: str
    filters: Sequence[FilterPlugin]
    scorer: ScorePlugin

    def feasible(self, cluster: ClusterState, task: TaskShape) -> tuple[BoolArray, Status]:
        """Mask of nodes passing every filter, and the status naming the first filter that emptied it."""
        mask = np.ones(cluster.size, dtype=np.bool_)
        for plugin in self.filters:
            mask &= plugin.filter(cluster, task)
            if not mask.any():
                ever = self.could_ever_fit(cluster, task)
                code = Code.UNSCHEDULABLE if ever.any() else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                return mask, Status(code, plugin.name, _reason(plugin.name, task, code))
        return mask, Status(Code.SUCCESS)

    def could_ever_fit(self, cluster: ClusterState, task: TaskShape) -> BoolArray:
        """Mask of nodes that would pass every filter empty: where ``task`` could ever run."""
        mask = np.ones(cluster.size, dtype=np.bool_)
        for plugin in self.filters:
            mask &= plugin.could_ever_fit(cluster, task)
        return mask


def _reason(plugin: str, task: TaskShape, code: Code) -> str:
    when = "no node can ever hold" if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else "no node has room for"
    return (
        f"{plugin}: {when} cpu={task.cpu_milli}m memory={task.memory_mib}Mi "
        f"gpu={task.num_gpu}x{task.gpu_milli}m models={list(task.gpu_models) or 'any'}"
    )


def best_fit_gpu(cluster: ClusterState, node: int, task: TaskShape) -> int:
    """The GPU slot with the least free share that still fits a shared task (first on ties)."""
    row = cluster.gpu_free[node]
    fits = row >= task.gpu_milli
    candidates = np.where(fits, row, np.iinfo(np.int64).max)
    return int(np.argmin(candidates))


def decide(
    cluster: ClusterState,
    task: TaskShape,
    profile: Profile,
    rng: np.random.Generator,
    allowed: BoolArray | None = None,
    spared: BoolArray | None = None,
) -> Decision:
    """Filter, score and choose one node (and GPU slots) for ``task``.  Does not change ``cluster``.

    ``allowed`` optionally restricts the candidates further (a placement worker's own share of
    the nodes); no allowed node fitting is reported as ``Unschedulable`` by ``"Allowed"``.
    ``spared`` nodes are chosen only when no other candidate fits (``shared/core/homes.py``).
    """
    mask, status = profile.feasible(cluster, task)
    if not status.ok:
        return Decision(status)
    if allowed is not None:
        mask = mask & allowed
        if not mask.any():
            return Decision(Status(Code.UNSCHEDULABLE, "Allowed", "no allowed node fits"))
    if spared is not None:
        elsewhere = mask & ~spared
        if elsewhere.any():
            mask = elsewhere
    feasible = np.flatnonzero(mask).astype(np.int64)
    scores = profile.scorer.score(cluster, task, feasible, rng)
    pos = int(np.argmax(scores.values))  # first maximum: ties go to the lowest node index
    node = int(feasible[pos])
    if task.num_gpu == 0:
        gpus: tuple[int, ...] = ()
    elif task.is_shared:
        gpu = int(scores.gpu[pos]) if scores.gpu is not None else best_fit_gpu(cluster, node, task)
        gpus = (gpu,)
    else:
        gpus = first_free_gpus(cluster.gpu_free[node], task.num_gpu)
    return Decision(Status(Code.SUCCESS, profile.scorer.name), node, gpus)
