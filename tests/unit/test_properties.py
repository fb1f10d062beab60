"""Invariants of DESIGN.md, checked on random clusters and task streams (hypothesis)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.cluster import ClusterState, Placement
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import decide
from shared.core.registry import POLICY_NAMES, build_profile
from shared.core.task import NodeSpec, TaskShape

MODELS = ("A100", "T4")

nodes_st = st.lists(
    st.builds(
        lambda i, cpu, mem, gpus, model: NodeSpec(f"n{i}", cpu, mem, gpus, model if gpus else ""),
        st.integers(0, 10**6),
        st.integers(0, 64).map(lambda c: c * 1000),
        st.integers(0, 256).map(lambda m: m * 1024),
        st.sampled_from([0, 1, 2, 4, 8]),
        st.sampled_from(MODELS),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda n: n.name,
)


@st.composite
def task_st(draw: st.DrawFn) -> TaskShape:
    kind = draw(st.sampled_from(["cpu", "shared", "whole"]))
    cpu = draw(st.integers(0, 40)) * 1000
    mem = draw(st.integers(0, 128)) * 1024
    models = draw(st.sampled_from([(), ("A100",), ("T4",)]))
    if kind == "cpu":
        return TaskShape(cpu, mem)
    if kind == "shared":
        return TaskShape(cpu, mem, 1, draw(st.integers(1, 999)), models)
    return TaskShape(cpu, mem, draw(st.sampled_from([1, 2, 4, 8])), 1000, models)


def _run(
    nodes: list[NodeSpec], tasks: list[TaskShape], policy: str, seed: int
) -> tuple[ClusterState, list[Placement]]:
    cluster = ClusterState(nodes)
    profile = build_profile(policy, TypicalWorkload.from_tasks(tasks, coverage=1.0))
    rng = np.random.default_rng(seed)
    placements = []
    for t in tasks:
        d = decide(cluster, t, profile, rng)
        if d.status.ok:
            placements.append(cluster.place(d.node, t, d.gpus))
    return cluster, placements


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=nodes_st, tasks=st.lists(task_st(), min_size=1, max_size=40), policy=st.sampled_from(POLICY_NAMES)
)
def test_no_placement_ever_exceeds_a_node_or_a_gpu(
    nodes: list[NodeSpec], tasks: list[TaskShape], policy: str
) -> None:
    cluster, placements = _run(nodes, tasks, policy, seed=3)
    assert (cluster.cpu_free >= 0).all() and (cluster.mem_free >= 0).all()
    assert (cluster.gpu_free >= 0).all() and (cluster.gpu_free <= cluster.gpu_cap).all()
    # Recount from the placements themselves, independent of the cluster's own bookkeeping.
    cpu = np.zeros(cluster.size, dtype=np.int64)
    gpu = np.zeros_like(cluster.gpu_cap)
    for p in placements:
        cpu[p.node] += p.task.cpu_milli
        for g in p.gpus:
            gpu[p.node, g] += p.task.gpu_milli
        if p.task.gpu_models and p.task.num_gpu:
            assert cluster.models[cluster.model_idx[p.node]] in p.task.gpu_models
    assert (cpu <= cluster.cpu_cap).all()
    assert (gpu <= cluster.gpu_cap).all()
    assert (cluster.cpu_cap - cluster.cpu_free == cpu).all()


@settings(max_examples=30, deadline=None)
@given(
    nodes=nodes_st, tasks=st.lists(task_st(), min_size=1, max_size=30), policy=st.sampled_from(POLICY_NAMES)
)
def test_the_same_seed_gives_identical_decisions(
    nodes: list[NodeSpec], tasks: list[TaskShape], policy: str
) -> None:
    _, first = _run(nodes, tasks, policy, seed=11)
    _, second = _run(nodes, tasks, policy, seed=11)
    assert first == second


@settings(max_examples=40, deadline=None)
@given(nodes=nodes_st, tasks=st.lists(task_st(), min_size=1, max_size=30), data=st.data())
def test_removing_a_placed_pod_restores_the_node_exactly(
    nodes: list[NodeSpec], tasks: list[TaskShape], data: st.DataObject
) -> None:
    cluster, placements = _run(nodes, tasks, "tessera", seed=5)
    if not placements:
        return
    victim = data.draw(st.sampled_from(placements))
    snapshot = cluster.copy()
    cluster.remove(victim)
    again = cluster.place(victim.node, victim.task, victim.gpus)
    assert again == victim
    assert (cluster.cpu_free == snapshot.cpu_free).all()
    assert (cluster.mem_free == snapshot.mem_free).all()
    assert (cluster.gpu_free == snapshot.gpu_free).all()
    assert (cluster.affinity == snapshot.affinity).all()
