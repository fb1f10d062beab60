"""The "timeline" protocol: pods arrive at ``creation_time`` and run for their trace duration.

* Arrivals and departures are processed in time order (departures first on equal times, so a
  pod leaving at t frees room for one arriving at t).
* A pod that fits on arrival starts at once; one that does not waits in a FIFO queue.  When a
  pod leaves node n, the waiting pods that now fit on n are retried in arrival order (each may
  still land on any node: the policy chooses).  Nothing else can make a waiting pod fit, since
  every other change only takes resources.
* A placed pod runs for ``deletion_time - creation_time`` from when it starts, so waiting delays
  its end instead of shortening its run.  Pods without a deletion time never leave.

Recorded: GPU allocation and queue length after every event, and each pod's wait.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.core.cluster import ClusterState, Placement
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import decide
from shared.core.registry import build_profile
from shared.core.task import MILLI, NodeSpec
from shared.sim.trace import TracePod

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TimelineResult:
    policy: str
    seed: int
    times: FloatArray  # event times (s)
    alloc: FloatArray  # GPU allocation % after each event
    queue: npt.NDArray[np.int64]  # waiting pods after each event
    waits: FloatArray  # seconds waited, per pod that started
    unplaced: int  # pods still waiting at the end
    pods: int
    last_arrival: float

    def summary(self) -> dict[str, float]:
        """Time-weighted GPU allocation over the arrival window, waits and queue figures."""
        inside = self.times <= self.last_arrival
        times, alloc = self.times[inside], self.alloc[inside]
        duration = float(times[-1] - times[0]) if times.size > 1 else 0.0
        if duration > 0:
            util = float((alloc[:-1] * np.diff(times)).sum() / duration)
        else:
            util = float(alloc.mean()) if alloc.size else 0.0
        waits = self.waits if self.waits.size else np.zeros(1)
        return {
            "util_mean": round(util, 3),
            "wait_mean_s": round(float(waits.mean()), 3),
            "wait_p50_s": round(float(np.percentile(waits, 50)), 3),
            "wait_p99_s": round(float(np.percentile(waits, 99)), 3),
            "alloc_max": round(float(self.alloc.max()), 3) if self.alloc.size else 0.0,
            "queue_max": int(self.queue.max()) if self.queue.size else 0,
            "unplaced": self.unplaced,
        }


def run_timeline(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    workload: TypicalWorkload | None = None,
    progress: Callable[[int, int], None] | None = None,
    speedup: float = 1.0,
) -> TimelineResult:
    """Replay ``pods`` on ``nodes``; ``speedup`` > 1 compresses arrival times (not run times)."""
    if speedup <= 0:
        raise ValueError("speedup must be positive")
    node_rng = np.random.default_rng([seed, 1])
    cluster = ClusterState([nodes[i] for i in node_rng.permutation(len(nodes))])
    typical = workload or TypicalWorkload.from_tasks(p.shape for p in pods)
    profile = build_profile(policy, typical)
    rng = np.random.default_rng([seed, 2])
    total = float(cluster.total_gpu_milli)

    arrival = [p.creation_time / speedup for p in pods]
    order = sorted(range(len(pods)), key=lambda i: (arrival[i], pods[i].name))
    shapes = [pods[i].shape for i in range(len(pods))]
    cpu = np.array([s.cpu_milli for s in shapes], dtype=np.int64)
    mem = np.array([s.memory_mib for s in shapes], dtype=np.int64)
    num = np.array([s.num_gpu for s in shapes], dtype=np.int64)
    milli = np.array([s.gpu_milli for s in shapes], dtype=np.int64)
    shared = (num == 1) & (milli < MILLI)
    model_ok = np.ones((len(pods), max(1, len(cluster.models))), dtype=np.bool_)
    for i, s in enumerate(shapes):
        if s.gpu_models:
            model_ok[i] = [m in s.gpu_models for m in cluster.models] or [False]

    # Event heap: (time, kind, seq, pod); kind 0 = departure before 1 = arrival at equal times.
    events: list[tuple[float, int, int, int]] = [(arrival[i], 1, k, i) for k, i in enumerate(order)]
    heapq.heapify(events)
    seq = len(events)
    running: dict[int, Placement] = {}
    queue: list[int] = []
    waits: list[float] = []
    times: list[float] = []
    alloc: list[float] = []
    qlen: list[int] = []
    used = 0
    done = 0

    def try_start(pod: int, now: float) -> bool:
        nonlocal used, seq
        decision = decide(cluster, shapes[pod], profile, rng)
        if not decision.status.ok:
            return False
        running[pod] = cluster.place(decision.node, shapes[pod], decision.gpus)
        used += shapes[pod].total_gpu_milli
        waits.append(now - arrival[pod])
        end = pods[pod].deletion_time
        if end is not None:
            duration = max(0.0, end - pods[pod].creation_time)
            heapq.heappush(events, (now + duration, 0, seq, pod))
            seq += 1
        return True

    def fits_node(candidates: npt.NDArray[np.int64], node: int) -> npt.NDArray[np.bool_]:
        gpu_row = cluster.gpu_free[node]
        whole_free = int((gpu_row == MILLI).sum())
        best_share = int(gpu_row.max())
        model = int(cluster.model_idx[node])
        ok = (cpu[candidates] <= cluster.cpu_free[node]) & (mem[candidates] <= cluster.mem_free[node])
        gpu_ok = np.where(shared[candidates], milli[candidates] <= best_share, num[candidates] <= whole_free)
        ok &= (num[candidates] == 0) | (gpu_ok & (model >= 0) & model_ok[candidates, max(model, 0)])
        result: npt.NDArray[np.bool_] = ok
        return result

    while events:
        now, kind, _, pod = heapq.heappop(events)
        if kind == 1:
            # A newcomer that fits starts at once (backfill); otherwise it joins the line.
            if not try_start(pod, now):
                queue.append(pod)
        else:
            placement = running.pop(pod)
            cluster.remove(placement)
            used -= shapes[pod].total_gpu_milli
            done += 1
            if queue:
                waiting = np.array(queue, dtype=np.int64)
                candidates = waiting[fits_node(waiting, placement.node)]
                started: set[int] = set()
                for cand in candidates.tolist():
                    if not fits_node(np.array([cand], dtype=np.int64), placement.node)[0]:
                        continue
                    if try_start(cand, now):
                        started.add(cand)
                if started:
                    queue = [q for q in queue if q not in started]
        times.append(now)
        alloc.append(100.0 * used / total)
        qlen.append(len(queue))
        if progress is not None and len(times) % 1000 == 0:
            progress(len(times), 2 * len(pods))
    if progress is not None:
        progress(2 * len(pods), 2 * len(pods))
    return TimelineResult(
        policy=policy,
        seed=seed,
        times=np.array(times),
        alloc=np.array(alloc),
        queue=np.array(qlen, dtype=np.int64),
        waits=np.array(waits),
        unplaced=len(queue),
        pods=len(pods),
        last_arrival=max(arrival),
    )
