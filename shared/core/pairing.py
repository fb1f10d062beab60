"""Pairing of GPU shares: the packings a clairvoyant placer would use, and how far a placement strays.

Shared tasks (a fraction of one GPU) end up sharing GPUs with whatever comes later, and what a
GPU finally wastes depends on which shares meet on it.  On openb's default trace a 470m task
beside another 470m one leaves 60m; beside a 320m one, 210m that only the rare tasks of 210m or
less can use.  A placer that looks one task ahead (FGD, and Tessera's fragmentation views) fills
the 530m left beside a 470m task with the next 320m task, because an open GPU that a whole-GPU
task can no longer use looks worse than a hole filled; the 470m task that comes next then opens
a GPU of its own.

What a clairvoyant placer would do is known from the workload alone.  Packing the shares in the
proportions the workload brings them is a cutting-stock problem, and its LP relaxation (the
*fluid* packing) says which combinations (*patterns*) of shares an optimal packing fills its
GPUs with: on the default trace 470m+470m, 650m+320m, 470m+460m, 590m+370m, 550m+230m+220m and
so on.  Online algorithms that steer each item into one of the fluid patterns lose little to the
clairvoyant packing when item sizes take few values (Gupta and Radovanovic, *Interior-point-based
online stochastic bin packing*, Operations Research 2020; Csirik et al., SIAM J. Comput. 2006).

Here each GPU state (the milli-GPU its shares use) gets the expected **final waste** of the
fluid patterns it is still on the way to: ``W(u)`` = the idle share of the patterns that have a
sub-multiset of shares summing to ``u``, averaged with the number of GPUs the fluid packing fills
with each (so a rare pattern does not make a common state look better than it is); a GPU on no
pattern's way keeps its whole free share as waste (``MILLI - u``): nothing the clairvoyant
packing plans will fill it.
A fresh GPU has ``W(0) = 0``.  Placing a share of ``m`` on a GPU using ``u`` costs
``W(u + m) - W(u)`` milli-GPU: zero when it completes or continues a planned pattern, the
pattern's waste when it opens a GPU, and more when it turns a planned hole into a dead one.

The LP is solved once per typical workload in its *arc-flow* form (Valerio de Carvalho, 1999):
one node per reachable used share 0..MILLI, one arc per share size from each node, a loss arc
from each node to the end, flow conservation, each size's arcs carrying exactly its demand, and
the GPUs opened (the flow out of 0) minimised.  Its size does not depend on how many patterns
exist (about a thousand nodes times the number of share sizes), and a flow decomposition of the
optimum gives the patterns.  Where pods name GPU models, each model gets its own packing of the
shares that may use it (a shape's demand spread over its allowed models in proportion to their
GPUs, as for pool pressure); models whose shares come in the same proportions share one LP, so
a trace without constraints solves one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shared.core.fragmentation import FloatArray, TypicalWorkload
from shared.core.lp import silent_highs
from shared.core.task import MILLI

Pattern = tuple[tuple[int, ...], float]  # the shares on one GPU, and how many GPUs use it (LP)

_TOL = 1e-9  # flows below this share of the GPUs opened are the solver's noise


def fluid_patterns(demand: Mapping[int, float]) -> list[Pattern]:
    """The patterns of the fluid (LP) packing of shares of each size (milli, 0 < m < MILLI) in
    the given amounts into GPUs of ``MILLI``, with the number of GPUs (fractional) each fills."""
    sizes = sorted((m for m, d in demand.items() if d > 0), reverse=True)
    if not sizes:
        return []
    if any(not 0 < m < MILLI for m in sizes):
        raise ValueError(f"share sizes must lie strictly between 0 and {MILLI}: {sizes}")
    reach = np.zeros(MILLI + 1, dtype=np.bool_)
    reach[0] = True
    for v in range(MILLI + 1):
        if reach[v]:
            for m in sizes:
                if v + m <= MILLI:
                    reach[v + m] = True
    nodes = np.flatnonzero(reach).tolist()
    # Columns: item arcs (v, m) then loss arcs (v, end) for v > 0.
    arcs = [(v, m) for v in nodes for m in sizes if v + m <= MILLI]
    losses = [v for v in nodes if v > 0]
    n_arc = len(arcs)
    h = silent_highs()
    inf = float("inf")
    cost = np.array([1.0 if v == 0 else 0.0 for v, _ in arcs] + [0.0] * len(losses))
    h.addVars(cost.size, np.zeros(cost.size), np.full(cost.size, inf))
    h.changeColsCost(cost.size, np.arange(cost.size, dtype=np.int32), cost)
    # Conservation at every node but 0: flow in - flow out (items and loss) = 0.
    rows: dict[int, tuple[list[int], list[float]]] = {v: ([], []) for v in losses}
    for j, (v, m) in enumerate(arcs):
        rows[v + m][0].append(j)
        rows[v + m][1].append(1.0)
        if v > 0:
            rows[v][0].append(j)
            rows[v][1].append(-1.0)
    for k, v in enumerate(losses):
        rows[v][0].append(n_arc + k)
        rows[v][1].append(-1.0)
    for v in losses:
        idx, val = rows[v]
        h.addRow(0.0, 0.0, len(idx), np.array(idx, dtype=np.int32), np.array(val))
    for m in sizes:
        idx = [j for j, (_, size) in enumerate(arcs) if size == m]
        h.addRow(demand[m], demand[m], len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))
    h.run()
    flow = np.array(h.getSolution().col_value)
    return _decompose(arcs, losses, flow)


def _decompose(arcs: list[tuple[int, int]], losses: list[int], flow: FloatArray) -> list[Pattern]:
    """Split the arc flow into paths from 0 to the end: each path is one pattern."""
    n_arc = len(arcs)
    out: dict[int, list[tuple[int, int]]] = {}  # node -> [(column, size or -1 for the loss arc)]
    for j, (v, m) in enumerate(arcs):
        out.setdefault(v, []).append((j, m))
    for k, v in enumerate(losses):
        out.setdefault(v, []).append((n_arc + k, -1))
    left = flow.copy()
    opened = float(sum(left[j] for j, _ in out.get(0, [])))
    eps = _TOL * max(opened, 1.0)
    patterns: dict[tuple[int, ...], float] = {}
    while True:
        path: list[int] = []
        items: list[int] = []
        v = 0
        while True:
            # The largest remaining arc (ties: the first), so the decomposition is deterministic.
            choice = max(out.get(v, []), key=lambda jm: left[jm[0]], default=None)
            if choice is None or left[choice[0]] <= eps:
                break  # stuck by rounding: what was gathered ends here, as if by its loss arc
            j, m = choice
            path.append(j)
            if m < 0:
                break
            items.append(m)
            v += m
        if not path:
            break
        amount = float(min(left[j] for j in path))
        for j in path:
            left[j] -= amount
        key = tuple(sorted(items, reverse=True))
        if key:
            patterns[key] = patterns.get(key, 0.0) + amount
    return sorted(patterns.items(), key=lambda kv: (-kv[1], kv[0]))


def final_waste(patterns: list[Pattern]) -> FloatArray:
    """``W(u)`` for u = 0..MILLI: the expected waste of the patterns with a sub-multiset of
    shares summing to ``u``, each weighted by the GPUs the fluid packing fills with it; else
    ``MILLI - u`` (no planned pattern fills that GPU); ``W(0) = 0``."""
    used = np.arange(MILLI + 1)
    wasted = np.zeros(MILLI + 1)
    weights = np.zeros(MILLI + 1)
    total = sum(w for _, w in patterns)
    for shares, weight in patterns:
        if weight <= _TOL * total:
            continue
        sums = {0}
        for m in shares:
            sums |= {s + m for s in sums}
        idx = np.fromiter(sums, dtype=np.int64)
        wasted[idx] += weight * float(MILLI - sum(shares))
        weights[idx] += weight
    planned = weights > 0
    table: FloatArray = np.where(
        planned, wasted / np.where(planned, weights, 1.0), (MILLI - used).astype(np.float64)
    )
    table[0] = 0.0
    return table


def demand_per_model(
    workload: TypicalWorkload, models: tuple[str, ...], gpus: FloatArray
) -> list[dict[int, float]]:
    """Per GPU model, the popularity of each share size that may use it: a shape naming models
    spreads its demand over them in proportion to their GPUs (``gpus``: the cluster's per model)."""
    access = workload.access(models)
    per_model: list[dict[int, float]] = [{} for _ in models]
    for k in range(len(workload)):
        m, n = int(workload.gpu_milli[k]), int(workload.num_gpu[k])
        if n != 1 or not 0 < m < MILLI:
            continue
        allowed = access[:, k]
        if not allowed.any() or gpus[allowed].sum() <= 0:
            continue
        for i in np.flatnonzero(allowed).tolist():
            part = float(workload.freq[k]) * float(gpus[i]) / float(gpus[allowed].sum())
            per_model[i][m] = per_model[i].get(m, 0.0) + part
    return per_model


def pairing_table(workload: TypicalWorkload, models: tuple[str, ...], gpus: FloatArray) -> FloatArray:
    """(len(models) + 1, MILLI + 1): ``W`` per GPU model (``gpus``: the cluster's GPUs of each);
    the last row, for nodes without GPUs, is never read (no share runs there)."""
    table = np.tile(final_waste([]), (len(models) + 1, 1))  # no pattern: every free share is lost
    solved: dict[tuple[tuple[int, float], ...], FloatArray] = {}
    for i, demand in enumerate(demand_per_model(workload, models, gpus)):
        total = sum(demand.values())
        if total <= 0:
            continue
        # Proportions, rounded: models whose shares come alike share one LP (and one answer).
        key = tuple(sorted((m, round(d / total, 12)) for m, d in demand.items()))
        if key not in solved:
            solved[key] = final_waste(fluid_patterns(dict(key)))
        table[i] = solved[key]
    return table
