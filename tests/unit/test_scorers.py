"""Each baseline scorer's defining preference, on clusters small enough to reason about."""

import numpy as np
import pytest

from shared.core.cluster import ClusterState
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import decide
from shared.core.plugins.scorers.fgd import quantised_score
from shared.core.plugins.scorers.tessera import TesseraScorer
from shared.core.registry import POLICY_NAMES, build_profile, check_options
from shared.core.task import TaskShape
from tests.unit.builders import cluster, node, task

RNG = np.random.default_rng(0)


def _choose(
    policy: str, c: ClusterState, t: TaskShape, workload: TypicalWorkload | None = None
) -> tuple[str, tuple[int, ...]]:
    profile = build_profile(policy, workload or TypicalWorkload.from_tasks([t], coverage=1.0))
    decision = decide(c, t, profile, np.random.default_rng(1))
    assert decision.status.ok, decision.status
    return c.names[decision.node], decision.gpus


def test_bestfit_picks_the_node_left_fullest() -> None:
    c = cluster(node("roomy", cpu=64_000, gpus=8), node("snug", cpu=8_000, gpus=2))
    assert _choose("bestfit", c, task(cpu=4_000, gpus=1))[0] == "snug"


def test_gpupacking_prefers_a_partly_used_gpu_to_an_idle_node() -> None:
    c = cluster(node("idle", gpus=2), node("used", gpus=2))
    c.place(1, task(gpus=1, milli=500), (0,))
    name, gpus = _choose("gpupacking", c, task(gpus=1, milli=400))
    assert (name, gpus) == ("used", (0,))


def test_gpuclustering_keeps_tasks_of_one_shape_together() -> None:
    c = cluster(node("whole", gpus=8), node("shared", gpus=8))
    c.place(0, task(gpus=1), (0,))
    c.place(1, task(gpus=1, milli=300), (0,))
    assert _choose("gpuclustering", c, task(gpus=1, milli=300))[0] == "shared"
    assert _choose("gpuclustering", c, task(gpus=1))[0] == "whole"


def test_dotprod_sends_a_cpu_heavy_task_where_cpu_is_free_and_gpu_is_not() -> None:
    c = cluster(node("gpu-rich", cpu=8_000, gpus=8), node("cpu-rich", cpu=96_000, gpus=1))
    # The dot product of demand and free resources is smaller on the GPU-rich node for a CPU task.
    assert _choose("dotprod", c, task(cpu=4_000))[0] == "gpu-rich"


def test_fgd_takes_the_gpu_where_fragmentation_grows_least_not_the_tightest() -> None:
    c = cluster(node(gpus=2))
    c.place(0, task(gpus=1, milli=300), (0,))  # GPU 0 has 700 free, GPU 1 is idle
    workload = TypicalWorkload.from_tasks([task(gpus=1, milli=600)], coverage=1.0)
    assert _choose("bestfit", c, task(gpus=1, milli=400))[1] == (0,)
    assert _choose("fgd", c, task(gpus=1, milli=400), workload)[1] == (1,)


def test_fgd_quantises_like_kube_scheduler() -> None:
    assert quantised_score(np.array([0.0]))[0] == 50
    assert quantised_score(np.array([-1e6]))[0] == 100
    assert quantised_score(np.array([1000.0]))[0] == 26  # int(100 * sigmoid(-1))


def test_random_is_reproducible_under_a_seed() -> None:
    c = cluster(*[node(f"n{i}") for i in range(20)])
    t = task(gpus=1, milli=500)
    profile = build_profile("random", TypicalWorkload.from_tasks([t]))
    a = [decide(c, t, profile, np.random.default_rng(7)).node for _ in range(3)]
    b = [decide(c, t, profile, np.random.default_rng(7)).node for _ in range(3)]
    assert a == b


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_places_a_feasible_task_on_a_feasible_node(policy: str) -> None:
    c = cluster(node("tiny", cpu=1_000, gpus=1), node("ok", cpu=16_000, gpus=4, model="T4"))
    t = task(cpu=8_000, gpus=2, models=("T4",))
    assert _choose(policy, c, t)[0] == "ok"


def test_tessera_keeps_cpu_only_work_off_gpu_nodes_short_of_cpu() -> None:
    # A CPU task on the 8-GPU node would leave its GPUs without the CPU their typical tasks need.
    c = cluster(node("gpu-dense", cpu=48_000, gpus=8), node("cpu-rich", cpu=96_000, gpus=2))
    workload = TypicalWorkload.from_tasks([task(cpu=6_000, gpus=1)] * 3 + [task(cpu=16_000)], coverage=1.0)
    assert _choose("tessera", c, task(cpu=16_000), workload)[0] == "cpu-rich"


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("node_gpus", [16, 72])
def test_every_policy_places_on_nodes_with_more_than_eight_gpus(policy: str, node_gpus: int) -> None:
    # HGX nodes have 16 GPUs and NVL racks 72: the scorers once assumed at most 8 and raised IndexError.
    c = cluster(node("big", cpu=256_000, mem=2_097_152, gpus=node_gpus, model="H100"), node("small", gpus=8))
    shapes = [task(cpu=48_000, gpus=12), task(gpus=1, milli=500), task(cpu=8_000, gpus=2), task(cpu=4_000)]
    profile = build_profile(policy, TypicalWorkload.from_tasks(shapes, coverage=1.0))
    rng = np.random.default_rng(1)
    for t in shapes:
        decision = decide(c, t, profile, rng)
        assert decision.status.ok, (policy, t, decision.status)
        c.place(decision.node, t, decision.gpus)
    assert c.affinity[0, 12] == 1  # the 12-GPU task is counted in its own class on the big node
    assert c.used_gpu_milli() == 12_000 + 500 + 2_000


def test_scorer_options_reach_the_scorer_and_wrong_ones_are_refused_by_name() -> None:
    workload = TypicalWorkload.from_tasks([task(gpus=1)])
    scorer = build_profile("tessera", workload, {"scarcity": False, "band": 800.0}).scorer
    assert isinstance(scorer, TesseraScorer) and not scorer.scarcity and scorer.band == 800.0
    check_options("tessera", {"pressure_weight": 0.5})
    with pytest.raises(ValueError, match="scarcty"):
        check_options("tessera", {"scarcty": False})
    with pytest.raises(ValueError, match="band: Input should be greater than 0"):
        check_options("tessera", {"band": -1})
    with pytest.raises(ValueError, match="'bestfit' has no options"):
        check_options("bestfit", {"band": 1})
    with pytest.raises(ValueError, match="learnt from the jobs"):
        check_options("fgd", {"workload": 1})
