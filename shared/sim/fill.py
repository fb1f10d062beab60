"""The FGD paper's "fill" protocol: pods arrive in a seeded random order and never leave.

0. Nodes are put in a seeded random order.  The artifact prefixes node names with a random
   permutation and its scheduler takes the first of equally scored nodes in name order, so ties
   go to a fixed random node ranking (not a fresh coin per decision); that is what packs nodes
   on ties and what the published curves depend on.
1. Pods are sorted by name and shuffled with the seed.
2. While their GPU requests total less than ``inflation`` (1.3) times the cluster's GPUs, pods
   drawn uniformly (with replacement) from the trace are appended, as the artifact's tuning does.
3. Each pod is scheduled once; one that does not fit is dropped (counted as failed).
4. After every pod the GPU allocation, the fragmentation amount and the arrived GPU workload are
   recorded; the curve at arrived x% is the mean over the records whose arrived share rounds to x
   (the artifact's discretisation), falling back to the records within x±1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig, Snapshot, run_cycle
from shared.core.fragmentation import FragmentationModel, NodeFragmentation, TypicalWorkload
from shared.core.framework import Profile
from shared.core.jobs import Job
from shared.core.queues import open_tree
from shared.core.registry import build_profile
from shared.core.task import NodeSpec
from shared.sim.trace import TracePod

FloatArray = npt.NDArray[np.float64]
ARRIVED_POINTS = np.arange(0, 131)


@dataclass(frozen=True)
class FillResult:
    policy: str
    seed: int
    arrived: FloatArray  # % of cluster GPUs, per point in ARRIVED_POINTS
    alloc: FloatArray  # GPU allocation %
    frag_amount: FloatArray  # fragmented GPU, % of all GPUs
    frag_ratio: FloatArray  # fragmented GPU, % of idle GPUs
    pods: int
    failed: int
    decisions_s: float  # seconds spent in run_cycle (one cycle per pod)

    def at(self, series: str, arrived: int) -> float:
        values: FloatArray = getattr(self, series)
        return float(values[int(arrived)])


def fill_order(pods: Sequence[TracePod], total_gpu_milli: int, seed: int, inflation: float) -> list[TracePod]:
    """Shuffled trace followed by resampled pods up to ``inflation`` x the cluster's GPUs."""
    rng = np.random.default_rng([seed, 0])
    by_name = sorted(pods, key=lambda p: p.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    requested = sum(p.shape.total_gpu_milli for p in order)
    target = inflation * total_gpu_milli
    while True:
        pod = by_name[int(rng.integers(len(by_name)))]
        if requested + pod.shape.total_gpu_milli > target:
            break
        order.append(pod)
        requested += pod.shape.total_gpu_milli
    return order


def discretise(arrived_pct: FloatArray, values: FloatArray) -> FloatArray:
    """Mean of ``values`` over records whose arrived % rounds to each point (the artifact's rule)."""
    rounded = np.round(arrived_pct)
    out = np.full(ARRIVED_POINTS.size, np.nan)
    sums = np.bincount(rounded.astype(np.int64).clip(0, 200), weights=values, minlength=201)
    counts = np.bincount(rounded.astype(np.int64).clip(0, 200), minlength=201)
    for x in ARRIVED_POINTS:
        if counts[x]:
            out[x] = sums[x] / counts[x]
        else:
            window = (rounded >= x - 1) & (rounded <= x + 1)
            if window.any():
                out[x] = float(values[window].mean())
    # Points with no record nearby (a tiny trace) take the nearest earlier value, or the first one.
    valid = np.flatnonzero(~np.isnan(out))
    if valid.size == 0:
        return np.zeros(ARRIVED_POINTS.size)
    nearest = valid[np.clip(np.searchsorted(valid, ARRIVED_POINTS, side="right") - 1, 0, None)]
    return np.round(out[nearest], 2)


def fill_config(profile: Profile) -> CycleConfig:
    """The cycle as the fill protocol runs it: pods never leave and each is tried once, so the
    allocate stage alone decides (the scripts that replay the protocol use it too)."""
    return CycleConfig(
        profile,
        fair_share=False,
        reserve=False,
        preempt=False,
        reclaim=False,
        elastic=False,
        spare_scarce_homes=False,
    )


def run_fill(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    inflation: float = 1.3,
    workload: TypicalWorkload | None = None,
    progress: Callable[[int, int], None] | None = None,
    options: Mapping[str, float | bool] | None = None,
) -> FillResult:
    import time  # timing the decisions is measurement, not part of any decision

    node_rng = np.random.default_rng([seed, 1])
    cluster = ClusterState([nodes[i] for i in node_rng.permutation(len(nodes))])
    typical = workload or TypicalWorkload.from_tasks(p.shape for p in pods)
    profile = build_profile(policy, typical, options)
    config = fill_config(profile)
    meter = NodeFragmentation(FragmentationModel(typical, cluster.models), cluster)
    queues = open_tree(["default"])  # built once: every pod is a job of one open queue
    order = fill_order(pods, cluster.total_gpu_milli, seed, inflation)
    rng = np.random.default_rng([seed, 2])
    total = float(cluster.total_gpu_milli)

    n = len(order)
    arrived = np.zeros(n)
    used = np.zeros(n)
    frag = np.zeros(n)
    arrived_milli = 0
    used_milli = 0
    failed = 0
    spent = 0.0
    for i, pod in enumerate(order):
        arrived_milli += pod.shape.total_gpu_milli
        job = Job(id=pod.name, queue="default", tenant="", shape=pod.shape)
        start = time.perf_counter()
        result = run_cycle(Snapshot(cluster, [job], queues=queues), config, 0.0, rng)
        spent += time.perf_counter() - start
        placements = result.placed.get(job.id)
        if placements:
            for p in placements:
                cluster.place(p.node, p.task, p.gpus)
            used_milli += pod.shape.total_gpu_milli
        else:
            failed += 1
        arrived[i] = arrived_milli
        used[i] = used_milli
        frag[i] = meter.current(cluster).sum()
        if progress is not None and (i % 500 == 0 or i == n - 1):
            progress(i + 1, n)

    arrived_pct = 100.0 * arrived / total
    idle = np.maximum(total - used, 1.0)
    return FillResult(
        policy=policy,
        seed=seed,
        arrived=ARRIVED_POINTS.astype(np.float64),
        alloc=discretise(arrived_pct, 100.0 * used / total),
        frag_amount=discretise(arrived_pct, 100.0 * frag / total),
        frag_ratio=discretise(arrived_pct, 100.0 * frag / idle),
        pods=n,
        failed=failed,
        decisions_s=spent,
    )
