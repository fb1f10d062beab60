"""The offline bound: exact on small cases, never below what a policy achieves."""

from __future__ import annotations

import numpy as np
import pytest

from shared.core.task import NodeSpec, TaskShape
from shared.sim.bound import arrived_until, offline_bound
from shared.sim.fill import fill_order, run_fill
from shared.sim.trace import TracePod


@pytest.mark.parametrize(
    ("nodes", "pods", "best"),
    [
        # Two 600m shares cannot share a GPU: one per GPU.
        (
            [NodeSpec("a", 8000, 8000, 1, "T4"), NodeSpec("b", 8000, 8000, 1, "T4")],
            [TaskShape(1000, 1, 1, 600)] * 3,
            1200,
        ),
        # 400m + 400m on one GPU, the whole-GPU task on the other.
        (
            [NodeSpec("a", 8000, 8000, 2, "T4")],
            [TaskShape(1000, 1, 1, 400)] * 3 + [TaskShape(1000, 1, 1, 1000)],
            1800,
        ),
        # CPU runs out first: one of the two 1-GPU tasks.
        ([NodeSpec("a", 2000, 8000, 2, "T4")], [TaskShape(1500, 1, 1, 1000)] * 2, 1000),
        # A pod pinned to a model that is busy elsewhere cannot use the idle V100.
        (
            [NodeSpec("a", 8000, 8000, 1, "T4"), NodeSpec("b", 8000, 8000, 1, "V100")],
            [TaskShape(1000, 1, 1, 1000, ("T4",))] * 2,
            1000,
        ),
    ],
)
def test_the_bound_is_the_best_packing_on_small_cases(
    nodes: list[NodeSpec], pods: list[TaskShape], best: int
) -> None:
    b = offline_bound(nodes, pods)
    assert b.converged and abs(b.upper_gpu_milli - best) < 1e-6


def test_no_policy_allocates_more_than_the_bound() -> None:
    rng = np.random.default_rng(3)
    nodes = [NodeSpec(f"n{i}", 32_000, 65_536, int(g), "T4") for i, g in enumerate(rng.choice([2, 4, 8], 8))]
    shapes = [TaskShape(4000, 1024, 1, m) for m in (250, 470, 810, 1000)] + [TaskShape(8000, 1024, 2, 1000)]
    pods = [TracePod(f"p{i}", shapes[int(rng.integers(len(shapes)))]) for i in range(120)]
    total = sum(n.gpu_count for n in nodes) * 1000
    for policy in ("fgd", "tessera", "bestfit"):
        result = run_fill(nodes, pods, policy, 7)
        prefix = arrived_until([p.shape for p in fill_order(pods, total, 7, 1.3)], total, 100.5)
        assert result.at("alloc", 100) <= offline_bound(nodes, prefix).upper_pct + 1e-6
