"""An upper bound on the GPU share any policy could allocate: a clairvoyant offline packing.

Given the pods that have arrived (every one known in advance, placed in any order, on empty
nodes), no scheduler can allocate more GPU than the best packing of them.  That packing is a
bin-packing problem with several dimensions (CPU, memory, whole GPUs, and shares that must fit
inside one GPU) over 1,213 nodes and thousands of pods, too big to solve exactly, so this module
bounds it with the *configuration LP* (Gilmore and Gomory's cutting-stock relaxation), solved
by column generation with HiGHS:

* Pods with equal requests and accepted models form one *shape* s, with n_s pods; nodes with
  equal capacity and GPU model form one *type* t, with N_t nodes.  GPU-less pods never raise the
  GPU allocation, and a packing may leave any pod out, so only GPU pods take part.
* A *configuration* c of type t is a multiset of shapes that fits one node of t: CPU and memory
  summed, whole-GPU tasks on distinct GPUs, shares packed into single GPUs (each share lies on
  one GPU, as in the cluster model).  Its value v_c is the milli-GPU it allocates.
* The master LP chooses how many nodes of each type use each configuration:
  ``max sum v_c x_{t,c}`` subject to ``sum_c x_{t,c} <= N_t`` (duals mu_t) and
  ``sum_{t,c} a_{s,c} x_{t,c} <= n_s`` (duals pi_s), ``x >= 0``.  Every integer packing is a
  feasible point, so its optimum bounds the integer optimum from above.
* Pricing, per type, is a small MIP over the GPUs of one node: the configuration of the largest
  reduced value ``sum_s (g_s - pi_s) k_s - mu_t``.  New columns are added until none has a
  positive reduced value.

At every iteration ``z_master + sum_t N_t * max(0, best reduced value of t)`` is a valid upper
bound on the LP optimum (the Lagrangian or Farley bound), using the pricing MIPs' own upper
bounds, so the figure is an upper bound even when the iteration limit stops the generation
early; ``gap`` says how far that is from the master's value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from shared.core.lp import silent_highs
from shared.core.task import MILLI, NodeSpec, TaskShape

EPS = 1e-6


@dataclass(frozen=True)
class Bound:
    upper_gpu_milli: float  # no packing of the pods allocates more (valid upper bound)
    master_gpu_milli: float  # the best fractional packing found (= upper when converged)
    total_gpu_milli: int
    iterations: int
    columns: int
    converged: bool

    @property
    def upper_pct(self) -> float:
        return 100.0 * self.upper_gpu_milli / self.total_gpu_milli

    @property
    def gap_pct(self) -> float:
        return 100.0 * (self.upper_gpu_milli - self.master_gpu_milli) / self.total_gpu_milli


@dataclass(frozen=True)
class _Type:
    cpu: int
    mem: int
    gpus: int
    model: str


def _node_types(nodes: Sequence[NodeSpec]) -> Counter[_Type]:
    return Counter(_Type(n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model) for n in nodes if n.gpu_count)


def _fits_type(shape: TaskShape, t: _Type) -> bool:
    if shape.gpu_models and t.model not in shape.gpu_models:
        return False
    return shape.cpu_milli <= t.cpu and shape.memory_mib <= t.mem and shape.num_gpu <= t.gpus


CPU_UNIT = 250
"""Pricing works on a CPU grid of this many milli-cores: pods' CPU rounded down, nodes' rounded
up, so the relaxed pricing can only over-estimate (the bound stays an upper bound)."""


def _share_patterns(
    shares: list[tuple[int, int, float, int]], step: int, cpu_cells: int
) -> tuple[np.ndarray, np.ndarray]:
    """Best profit of one GPU holding shares, for every CPU budget: an unbounded two-dimensional
    knapsack (milli-GPU in ``step`` units, CPU cells).  ``shares``: (milli, cpu cells, profit,
    shape index).  Returns (value[m, c], choice[m, c]: the item that last improved the cell)."""
    cells_m = MILLI // step + 1
    value = np.zeros((cells_m, cpu_cells + 1))
    choice = np.full((cells_m, cpu_cells + 1), -1, dtype=np.int64)
    for item, (milli, cpu, profit, _) in enumerate(shares):
        w = milli // step
        for m in range(w, cells_m):
            if cpu > cpu_cells:
                break
            cand = np.full(cpu_cells + 1, -np.inf)
            cand[cpu:] = value[m - w, : cpu_cells + 1 - cpu] + profit
            better = cand > value[m] + 1e-12
            value[m] = np.where(better, cand, value[m])
            choice[m] = np.where(better, item, choice[m])
    return value, choice


def _price(
    t: _Type, shapes: list[TaskShape], profit: np.ndarray, mu: float
) -> tuple[float, float, dict[int, int]]:
    """Best configuration of one node of type ``t`` for the reduced profits: (its reduced value,
    an upper bound on the best reduced value, shape index -> count).

    Exact dynamic programme for a relaxation of the node: CPU on a grid, memory and the pods'
    counts not limiting (the master's rows keep the counts).  GPU slots are filled one at a
    time, each either with a pattern of shares (the best pattern for each CPU budget, from
    :func:`_share_patterns`) or as part of a whole-GPU pod of k slots."""
    cands = [i for i, s in enumerate(shapes) if profit[i] > EPS and _fits_type(s, t)]
    if not cands:
        return -mu, -mu, {}
    cells = -(-t.cpu // CPU_UNIT)  # rounded up
    share_items = [
        (shapes[i].gpu_milli, shapes[i].cpu_milli // CPU_UNIT, float(profit[i]), i)
        for i in cands
        if shapes[i].is_shared
    ]
    whole_items = [
        (shapes[i].num_gpu, shapes[i].cpu_milli // CPU_UNIT, float(profit[i]), i)
        for i in cands
        if not shapes[i].is_shared
    ]
    step = 0
    for milli, _, _, _ in share_items:
        step = math.gcd(step, milli)
    step = math.gcd(step, MILLI) if step else MILLI
    pattern, pattern_choice = _share_patterns(share_items, step, cells)
    best_pattern = pattern[-1]  # a whole GPU's worth of shares, per CPU budget
    slots = t.gpus
    value = np.full((slots + 1, cells + 1), -np.inf)
    value[0, :] = 0.0
    # How each (slots, cpu) cell was reached: kind 0 = a share slot using ``arg`` CPU cells,
    # kind 1 = whole pod ``arg``; the cell it came from follows from those.
    kind = np.full((slots + 1, cells + 1), -1, dtype=np.int64)
    arg = np.zeros((slots + 1, cells + 1), dtype=np.int64)
    c_idx = np.arange(cells + 1)
    for g in range(1, slots + 1):
        # Share slot: max over c' <= c of value[g-1, c - c'] + best_pattern[c'].
        prev = value[g - 1]
        shift = c_idx[:, None] - c_idx[None, :]  # [c, c'] -> c - c'
        table = np.where(shift >= 0, prev[np.clip(shift, 0, None)] + best_pattern[None, :], -np.inf)
        pick = np.argmax(table, axis=1)
        value[g] = table[c_idx, pick]
        kind[g], arg[g] = 0, pick
        for item, (k, cpu, p, _) in enumerate(whole_items):
            if k > g or cpu > cells:
                continue
            cand = np.full(cells + 1, -np.inf)
            cand[cpu:] = value[g - k, : cells + 1 - cpu] + p
            better = cand > value[g] + 1e-12
            value[g] = np.where(better, cand, value[g])
            kind[g] = np.where(better, 1, kind[g])
            arg[g] = np.where(better, item, arg[g])
    c = int(np.argmax(value[slots]))
    best = float(value[slots, c])
    counts: dict[int, int] = {}
    g = slots
    while g > 0:
        if kind[g, c] == 1:
            k, cpu, _, i = whole_items[int(arg[g, c])]
            counts[i] = counts.get(i, 0) + 1
            g, c = g - k, c - cpu
            continue
        budget = int(arg[g, c])
        m = pattern.shape[0] - 1
        cc = budget
        while m >= 0 and cc >= 0 and pattern_choice[m, cc] >= 0:
            milli, cpu, _, i = share_items[int(pattern_choice[m, cc])]
            counts[i] = counts.get(i, 0) + 1
            m, cc = m - milli // step, cc - cpu
        g, c = g - 1, c - budget
    # The column's own value, from its pods (the counts may exceed what exists: the master's
    # rows cap that), and the relaxation's optimum as the bound on what pricing can find.
    value_of = float(sum(profit[i] * k for i, k in counts.items()))
    return value_of - mu, best - mu, counts


def offline_bound(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TaskShape],
    max_iterations: int = 300,
) -> Bound:
    """Upper bound on the milli-GPU any placement of ``pods`` on ``nodes`` can allocate."""
    types = _node_types(nodes)
    tlist = list(types)
    total = sum(t.gpus * n for t, n in types.items()) * MILLI
    demand = Counter(p for p in pods if p.num_gpu)
    shapes = list(demand)
    n_s = np.array([demand[s] for s in shapes], dtype=np.float64)
    g_s = np.array([s.total_gpu_milli for s in shapes], dtype=np.float64)
    if not shapes:
        return Bound(0.0, 0.0, total, 0, 0, True)

    master = silent_highs()
    # Rows: one per type (capacity N_t), one per shape (n_s); columns added as generated.
    inf = highspy.kHighsInf
    for t in tlist:
        master.addRow(-inf, float(types[t]), 0, np.array([], dtype=np.int32), np.array([]))
    for k in range(len(shapes)):
        master.addRow(-inf, float(n_s[k]), 0, np.array([], dtype=np.int32), np.array([]))
    master.changeObjectiveSense(highspy.ObjSense.kMaximize)
    columns = 0

    def add_column(ti: int, counts: dict[int, int]) -> None:
        nonlocal columns
        idx = [ti] + [len(tlist) + i for i in sorted(counts)]
        val = [1.0] + [float(counts[i]) for i in sorted(counts)]
        value = float(sum(g_s[i] * k for i, k in counts.items()))
        master.addCol(value, 0.0, inf, len(idx), np.array(idx, dtype=np.int32), np.array(val))
        columns += 1

    # Seed with single-shape columns (as many of one shape as a node holds alone).
    for ti, t in enumerate(tlist):
        for i, s in enumerate(shapes):
            if not _fits_type(s, t):
                continue
            per_gpu = MILLI // s.gpu_milli if s.is_shared else 1
            by_gpu = (t.gpus * per_gpu) if s.is_shared else t.gpus // s.num_gpu
            k = min(by_gpu, t.cpu // max(1, s.cpu_milli), t.mem // max(1, s.memory_mib), int(n_s[i]))
            if k > 0:
                add_column(ti, {i: int(k)})

    upper = float("inf")
    z = 0.0
    converged = False
    iterations = 0
    for _ in range(max_iterations):
        iterations += 1
        master.run()
        z = float(master.getInfo().objective_function_value)
        duals = np.abs(np.array(master.getSolution().row_dual))  # <= rows of a maximisation
        mu, pi = duals[: len(tlist)], duals[len(tlist) :]
        profit = g_s - pi
        bound_here = z
        added = 0
        for ti, t in enumerate(tlist):
            value, best, counts = _price(t, shapes, profit, float(mu[ti]))
            bound_here += types[t] * max(0.0, best)
            if value > EPS * max(1.0, float(g_s.max())) and counts:
                add_column(ti, counts)
                added += 1
        upper = min(upper, bound_here)
        if added == 0 or upper - z <= 1e-6 * total:
            converged = upper - z <= 1e-3 * total
            break
    return Bound(min(upper, float(total), float(g_s @ n_s)), z, total, iterations, columns, converged)


def arrived_until(pods: Sequence[TaskShape], total_gpu_milli: int, arrived_pct: float) -> list[TaskShape]:
    """The longest prefix of ``pods`` (in arrival order) whose GPU requests stay within
    ``arrived_pct`` of the cluster's GPUs: every record the fill curve averages at that point
    (the records whose arrived share rounds to it) has at most these pods."""
    out: list[TaskShape] = []
    arrived = 0
    limit = arrived_pct / 100.0 * total_gpu_milli
    for p in pods:
        if arrived + p.total_gpu_milli > limit:
            break
        arrived += p.total_gpu_milli
        out.append(p)
    return out
