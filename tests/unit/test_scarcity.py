"""Shape scarcity (``shared/core/scarcity.py``): the slots a placement destroys of shapes that few
nodes can still hold are a cost, and nothing else changes while slots are plentiful."""

import math

import numpy as np
import pytest

from shared.core.cluster import ClusterState
from shared.core.fragmentation import FragmentationModel, TypicalWorkload
from shared.core.framework import Profile, decide
from shared.core.plugins.scorers import tessera
from shared.core.registry import default_filters
from shared.core.scarcity import NEGLIGIBLE, ShapeScarcity, equivalent_shapes, poisson_tails
from shared.core.task import TaskShape
from tests.unit.builders import cluster, node, task

SMALL = task(cpu=8_000, gpus=1)
SHARE = task(cpu=4_000, gpus=1, milli=550)
LARGE = task(cpu=120_000, gpus=8)  # fits only a node with 128 cores, as openb's G3 nodes


def _profile(workload: TypicalWorkload, scarcity: bool) -> Profile:
    scorer = tessera.build(tessera.Args(workload=workload, scarcity=scarcity))
    return Profile(name="tessera", filters=default_filters(), scorer=scorer)


def _node_for(c: ClusterState, t: TaskShape, workload: TypicalWorkload, scarcity: bool) -> str:
    decision = decide(c, t, _profile(workload, scarcity), np.random.default_rng(1))
    assert decision.status.ok, decision.status
    return c.names[decision.node]


def test_poisson_tails_are_one_minus_the_cdf() -> None:
    means = np.array([m for m in (0.0, 0.3, 2.5, 12.0, 40.0) for _ in range(60)])
    ks = np.array([k for _ in range(5) for k in range(60)])
    tails = poisson_tails(means, ks)
    for mean, k, tail in zip(means.tolist(), ks.tolist(), tails.tolist(), strict=True):
        below = sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k))
        assert tail == pytest.approx(max(0.0, 1.0 - below), abs=1e-9), (mean, k)


def test_a_small_task_leaves_the_last_node_a_rare_large_shape_fits() -> None:
    # One node of 128 cores among nodes of 96: only it can hold the 120-core, 8-GPU shape (1 task
    # in 2,000, as on openb where 5 of 8,152 pods need a 128-core node).  By popularity alone that
    # shape hardly counts, every empty node scores alike, and the tie goes to the first node.
    workload = TypicalWorkload.from_tasks([SHARE] * 1999 + [LARGE], coverage=1.0)
    nodes = [node("wide", cpu=128_000, gpus=8)] + [node(f"narrow{i}", cpu=96_000, gpus=8) for i in range(3)]
    assert _node_for(cluster(*nodes), SHARE, workload, scarcity=False) == "wide"
    assert _node_for(cluster(*nodes), SHARE, workload, scarcity=True) != "wide"
    # So does an 8-GPU task of 88 cores, which fits every node; the large task itself still goes
    # where it fits.
    wide_ish = task(cpu=88_000, gpus=8)
    workload = TypicalWorkload.from_tasks([SHARE] * 1989 + [wide_ish] * 10 + [LARGE], coverage=1.0)
    assert _node_for(cluster(*nodes), wide_ish, workload, scarcity=False) == "wide"
    assert _node_for(cluster(*nodes), wide_ish, workload, scarcity=True) != "wide"
    assert _node_for(cluster(*nodes), LARGE, workload, scarcity=True) == "wide"


def test_nothing_changes_while_slots_are_plentiful() -> None:
    workload = TypicalWorkload.from_tasks([SHARE] * 1999 + [LARGE], coverage=1.0)
    nodes = [node(f"wide{i}", cpu=128_000, gpus=8) for i in range(40)] + [node("narrow", cpu=96_000)]
    c = cluster(*nodes)
    with_term, without = _profile(workload, True), _profile(workload, False)
    rng = np.random.default_rng(3)
    for t in [SHARE, LARGE, SMALL, SHARE, task(cpu=4_000)] * 4:
        a = decide(c, t, with_term, rng)
        b = decide(c, t, without, rng)
        assert (a.node, a.gpus) == (b.node, b.gpus)
        c.place(a.node, t, a.gpus)


def test_slots_are_kept_current_as_nodes_fill() -> None:
    quarter = task(cpu=60_000, gpus=4)
    shapes = [SMALL] * 20 + [LARGE] * 2 + [task(cpu=4_000, gpus=1, milli=300)] * 10 + [quarter]
    workload = TypicalWorkload.from_tasks(shapes, coverage=1.0)
    c = cluster(*[node(f"n{i}", cpu=[128_000, 96_000, 64_000][i % 3], gpus=8) for i in range(12)])
    seen = 0
    model = FragmentationModel(workload, c.models)
    scarcity = ShapeScarcity(model, workload, c)
    rng = np.random.default_rng(5)
    for _ in range(40):
        scarcity.refresh(c)
        fresh = model.fits(c.cpu_free, c.gpu_free, c.model_idx)
        assert (scarcity.slots == fresh).all()
        assert (scarcity.supply == fresh.sum(axis=0)).all()
        # The costs skip shapes by a bound; they equal the exact tail wherever it counts.
        horizon = min(c.gpu_free.sum() / scarcity._gpu_per_pod, c.cpu_free.sum() / scarcity._cpu_per_pod)
        tails = poisson_tails(scarcity.pooled * horizon, scarcity.supply)
        exact = np.where((tails >= NEGLIGIBLE) & (scarcity.supply > 0), tails * scarcity.gpu, 0.0)
        assert scarcity.costs(c) == pytest.approx(exact, abs=1e-9)
        seen += int(exact.any())
        t = [SMALL, task(cpu=4_000, gpus=1, milli=300)][int(rng.integers(2))]
        room = np.flatnonzero((c.cpu_free >= t.cpu_milli) & (c.gpu_free >= t.gpu_milli).any(axis=1))
        if room.size == 0:
            break
        n = int(room[rng.integers(room.size)])
        gpu = int(np.flatnonzero(c.gpu_free[n] >= t.gpu_milli)[0])
        c.place(n, t, (gpu,))
    assert seen  # some shape became scarce on the way


def test_the_cost_rises_as_a_shapes_last_slots_go() -> None:
    workload = TypicalWorkload.from_tasks([SMALL] * 199 + [LARGE], coverage=1.0)
    c = cluster(*[node(f"wide{i}", cpu=128_000, gpus=8) for i in range(3)] + [node("narrow", cpu=96_000)])
    model = FragmentationModel(workload, c.models)
    scarcity = ShapeScarcity(model, workload, c)
    large = scarcity.own(LARGE)
    assert large >= 0 and scarcity.own(task(cpu=7_000, gpus=8)) == -1  # not a shape of the workload
    costs = []
    for n in range(3):
        costs.append(scarcity.costs(c)[large])
        c.place(n, SMALL, (0,))  # the node can no longer hold the large shape
    assert costs[0] < costs[1] < costs[2] <= 8_000
    assert scarcity.costs(c)[large] == 0  # no slot left to lose


def test_shapes_that_take_the_same_one_slot_per_node_are_one_pool() -> None:
    # openb's 8-GPU pods of 120 and of 120.2 cores each fit once on a 128-core node and nowhere
    # else: a pod of either takes the slot of both.  An 88-core 8-GPU pod also fits the 96-core
    # nodes (its slots only contain theirs), and 1-GPU pods of 4 and 5 cores fit several times a
    # node: neither joins a pool.
    large_b = task(cpu=120_200, gpus=8)
    wide_ish = task(cpu=88_000, gpus=8)
    one_a, one_b = task(cpu=4_000, gpus=1), task(cpu=5_000, gpus=1)
    shapes = [LARGE, large_b, wide_ish, one_a, one_b, task(cpu=4_000, gpus=1, models=("T4",))]
    workload = TypicalWorkload.from_tasks(shapes, coverage=1.0)
    c = cluster(node("wide", cpu=128_000, gpus=8), node("narrow", cpu=96_000, gpus=8))
    model = FragmentationModel(workload, c.models)
    rep = equivalent_shapes(model, c)
    scarcity = ShapeScarcity(model, workload, c)
    of = {t: scarcity._shapes[(t.cpu_milli, t.gpu_milli, t.num_gpu, t.gpu_models)] for t in shapes}
    assert rep[of[LARGE]] == rep[of[large_b]]
    assert len({int(rep[of[t]]) for t in shapes}) == len(shapes) - 1
    # The pool's first shape carries both shapes' popularity; a task of either uses its slot.
    first = int(rep[of[LARGE]])
    assert scarcity.pooled[first] == pytest.approx(scarcity.freq[of[LARGE]] + scarcity.freq[of[large_b]])
    assert scarcity.own(LARGE) == scarcity.own(large_b) == first


def test_a_pool_is_priced_on_its_joint_demand_and_charged_once() -> None:
    # 40 nodes of 128 cores; two 120-core-ish shapes, each alone well under the 40 slots, together
    # over them.  Apart, neither looked scarce; pooled, a slot destroyed costs one 8-GPU pod's
    # failure times P(both shapes' pods >= slots), and only once.
    large_b = task(cpu=120_200, gpus=8)
    share = task(cpu=1_000, gpus=1, milli=500)
    workload = TypicalWorkload.from_tasks([share] * 900 + [LARGE] * 50 + [large_b] * 50, coverage=1.0)
    c = cluster(*[node(f"wide{i}", cpu=128_000, gpus=8) for i in range(40)])
    model = FragmentationModel(workload, c.models)
    scarcity = ShapeScarcity(model, workload, c)
    cost = scarcity.costs(c)
    first = scarcity.own(LARGE)
    horizon = min(c.gpu_free.sum() / scarcity._gpu_per_pod, c.cpu_free.sum() / scarcity._cpu_per_pod)
    alone = poisson_tails(scarcity.freq[[first]] * horizon, scarcity.supply[[first]])[0]
    joint = poisson_tails(scarcity.pooled[[first]] * horizon, scarcity.supply[[first]])[0]
    assert alone < NEGLIGIBLE < joint  # apart it would cost nothing
    assert cost[first] == pytest.approx(joint * 8_000)
    assert np.count_nonzero(cost) == 1  # the pool's other shape carries no second cost
    # A 1-GPU share placed on an empty node destroys the node's one pooled slot: charged once.
    lost = scarcity.loss(
        cost,
        np.array([0]),
        np.array([c.cpu_free[0] - share.cpu_milli]),
        np.array([[500] + [1000] * 7]),
        c.model_idx[[0]],
        scarcity.own(share),
    )
    assert lost[0] == pytest.approx(joint * 8_000)
