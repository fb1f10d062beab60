import numpy as np

from shared.core.cluster import BoolArray, ClusterState
from shared.core.cycle import PendingJob, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Profile
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from tests.unit.builders import cluster, node, task


def test_a_gang_that_does_not_fit_whole_takes_nothing() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    jobs = [PendingJob("big", task(gpus=2), replicas=3), PendingJob("small", task(gpus=1), replicas=2)]
    result = run_cycle(
        c,
        jobs,
        build_profile("bestfit", TypicalWorkload.from_tasks([task(gpus=1)])),
        np.random.default_rng(0),
    )
    assert "big" in result.unschedulable and "big" not in result.placed
    assert len(result.placed["small"]) == 2
    assert c.used_gpu_milli() == 0  # the caller's state is never changed


def test_every_replica_of_a_fitting_job_is_placed_without_overlap() -> None:
    c = cluster(node("a", gpus=4), node("b", gpus=4))
    result = run_cycle(
        c,
        [PendingJob("j", task(gpus=2), replicas=4)],
        build_profile("fgd", TypicalWorkload.from_tasks([task(gpus=2)])),
        np.random.default_rng(0),
    )
    slots = [(p.node, g) for p in result.placed["j"] for g in p.gpus]
    assert len(slots) == 8 and len(set(slots)) == 8
    assert result.touched == {0, 1}


def test_preferred_nodes_are_tried_first_and_any_node_after() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    preferred = np.array([False, True])
    profile = build_profile("bestfit", TypicalWorkload.from_tasks([task(gpus=1)]))
    result = run_cycle(
        c, [PendingJob("j", task(gpus=1), replicas=3)], profile, np.random.default_rng(0), preferred=preferred
    )
    assert [p.node for p in result.placed["j"]] == [1, 1, 0]


def test_a_shape_that_failed_is_not_searched_again_in_the_same_cycle() -> None:
    c = cluster(node("a", gpus=2))
    base = build_profile("bestfit", TypicalWorkload.from_tasks([task(gpus=1)]))
    searched: list[int] = []

    class CountingFilter:
        name = "Counting"

        def filter(self, cluster: ClusterState, t: TaskShape) -> BoolArray:
            searched.append(t.num_gpu)
            return np.ones(cluster.size, dtype=np.bool_)

        def could_ever_fit(self, cluster: ClusterState, t: TaskShape) -> BoolArray:
            return np.ones(cluster.size, dtype=np.bool_)

    profile = Profile(base.name, [CountingFilter(), *base.filters], base.scorer)
    jobs = [PendingJob(f"big{i}", task(gpus=4), replicas=1) for i in range(50)]
    jobs += [PendingJob("gang", task(gpus=1), replicas=3), PendingJob("gang2", task(gpus=1), replicas=4)]
    jobs += [PendingJob("one", task(gpus=1), replicas=1)]
    result = run_cycle(c, jobs, profile, np.random.default_rng(0))
    assert set(result.unschedulable) == {f"big{i}" for i in range(50)} | {"gang", "gang2"}
    assert result.unschedulable["big49"] == result.unschedulable["big0"]  # the same reason
    assert [p.node for p in result.placed["one"]] == [0]  # fewer replicas of that shape still tried
    # One search for the 4-GPU shape, three for the gang (two fit, the third fails), none for the
    # larger gang of the same shape, one for "one".
    assert searched == [4, 1, 1, 1, 1]
