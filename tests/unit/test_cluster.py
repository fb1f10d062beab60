import numpy as np
import pytest

from shared.core.cluster import DEDUP_MIN_NODES, distinct_states, first_free_gpus
from tests.unit.builders import cluster, node, task


def test_placing_takes_exactly_the_requested_resources() -> None:
    c = cluster(node(cpu=16_000, mem=64_000, gpus=4))
    c.place(0, task(cpu=4_000, mem=8_000, gpus=2), (0, 1))
    assert c.free_state(0) == (12_000, 56_000, (0, 0, 1000, 1000))


def test_a_shared_task_takes_a_share_of_one_gpu() -> None:
    c = cluster(node(gpus=2))
    c.place(0, task(gpus=1, milli=300), (1,))
    assert c.free_state(0)[2] == (1000, 700)


def test_over_commit_is_refused_and_changes_nothing() -> None:
    c = cluster(node(cpu=2_000, gpus=1))
    before = c.free_state(0)
    with pytest.raises(ValueError):
        c.place(0, task(cpu=4_000), ())
    with pytest.raises(ValueError):
        c.place(0, task(gpus=1, milli=500), (3,))
    assert c.free_state(0) == before


def test_removing_a_placement_restores_the_node_and_its_version_digest() -> None:
    c = cluster(node(gpus=4))
    before = c.free_state(0)
    first = c.place(0, task(cpu=1_000, gpus=1, milli=100), (0,))
    version = int(c.version[0])
    placement = c.place(0, task(cpu=3_000, gpus=1, milli=250), (2,))
    assert int(c.version[0]) != version
    c.remove(placement)
    assert int(c.version[0]) == version  # the same state has the same version
    c.remove(first)
    assert c.free_state(0) == before


def test_a_copy_and_its_original_agree_on_equal_states_only() -> None:
    c = cluster(node(gpus=4))
    staged = c.copy()
    staged.place(0, task(gpus=1, milli=500), (0,))
    c.place(0, task(gpus=2), (0, 1))  # a different state on the original
    assert int(staged.version[0]) != int(c.version[0])
    again = c.copy()
    c.place(0, task(gpus=1, milli=500), (2,))
    again.place(0, task(gpus=1, milli=500), (2,))
    assert int(again.version[0]) == int(c.version[0])


def test_gpu_model_mismatch_is_not_a_fit() -> None:
    c = cluster(node(model="T4"))
    assert not c.fits(0, task(gpus=1, models=("A100",)), (0,))
    assert c.fits(0, task(gpus=1, models=("T4",)), (0,))


def test_whole_gpus_come_from_the_lowest_free_slots() -> None:
    c = cluster(node(gpus=4))
    c.place(0, task(gpus=1, milli=100), (0,))
    assert first_free_gpus(c.gpu_free[0], 2) == (1, 2)


def test_names_must_be_unique() -> None:
    with pytest.raises(ValueError):
        cluster(node("a"), node("a"))


def test_nodes_share_a_representative_only_when_state_and_model_agree() -> None:
    same = [node(f"a{i}", gpus=4) for i in range(DEDUP_MIN_NODES)]  # all alike while empty
    c = cluster(
        *same,
        node("c", gpus=8),  # a different size: never the same as the a's, even empty
        node("d", gpus=4, model="T4"),  # the a's size, another model
        node("e", gpus=4),
    )
    n = DEDUP_MIN_NODES
    c.place(n + 2, task(gpus=1, milli=500), (0,))  # e is no longer empty
    nodes = np.arange(c.size)
    reps, which = distinct_states(c, nodes)
    assert reps.tolist() == [0, n, n + 1, n + 2]
    assert reps[which].tolist() == [0] * n + [n, n + 1, n + 2]
    c.place(0, task(gpus=1, milli=500), (0,))  # now a0 is in e's state
    reps, which = distinct_states(c, nodes)
    assert reps[which].tolist() == [0] + [1] * (n - 1) + [n, n + 1, 0]


def test_a_few_nodes_are_returned_as_they_are() -> None:
    c = cluster(node("a"), node("b"), node("c"))
    reps, which = distinct_states(c, np.array([0, 2]))
    assert reps.tolist() == [0, 2] and which.tolist() == [0, 1]


def test_fresh_nodes_of_different_sizes_have_different_versions() -> None:
    c = cluster(node("a", cpu=8_000, gpus=2), node("b", cpu=16_000, gpus=2), node("c", cpu=8_000, gpus=2))
    assert len({int(v) for v in c.version}) == 2
    assert int(c.version[0]) == int(c.version[2])
