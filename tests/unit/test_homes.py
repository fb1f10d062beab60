"""A task keeps off the scarce homes of a more constrained waiting job while it fits elsewhere."""

from __future__ import annotations

from shared.core.cycle import CycleConfig, Snapshot
from shared.core.homes import HomeIndex, HomeLadder
from shared.core.memo import PendingDelta
from tests.unit.builders import cluster, node, task
from tests.unit.test_cycle import cycle, job, profile, running

WIDE = task(cpu=120_000, gpus=8)  # fits only a 128-core node
SMALL = task(cpu=1_000, gpus=1)


def _snapshot(small_node_full: bool = False) -> Snapshot:
    """Node 0 has 128 cores, node 1 has 64; both have 8 GPUs.  A 1-GPU, 96-core job runs on
    node 0, so the 120-core job (which only node 0 can hold) waits, and best fit would put the
    next 1-GPU job on node 0 too, the fuller one."""
    c = cluster(node("big", cpu=128_000, mem=512_000), node("small", cpu=64_000, mem=512_000))
    ran = [running(c, job("ran", shape=task(cpu=96_000, gpus=1)), [(0, (0,))])]
    if small_node_full:
        ran.append(running(c, job("full", gpus=8), [(1, tuple(range(8)))]))
    pending = [job("wide", shape=WIDE, submitted=0.0), job("next", shape=SMALL, submitted=1.0)]
    return Snapshot(c, pending, ran)


def _node_of_next(config: CycleConfig, small_node_full: bool = False) -> int:
    result = cycle(_snapshot(small_node_full), config)
    assert "wide" in result.unschedulable  # node 0 still has a GPU taken
    (placement,) = result.placed["next"]
    return placement.node


def test_a_task_that_fits_elsewhere_keeps_off_the_only_home_of_a_waiting_job() -> None:
    # No reservation, so only the rule keeps node 0 draining (on the pinned openb variant the
    # one EASY reservation was held elsewhere while a 206-hour pod took such a node).
    assert _node_of_next(CycleConfig(profile(), reserve=False)) == 1


def test_without_the_rule_best_fit_takes_the_scarce_home() -> None:
    assert _node_of_next(CycleConfig(profile(), reserve=False, spare_scarce_homes=False)) == 0


def test_a_task_that_fits_nowhere_else_still_takes_the_scarce_home() -> None:
    """The rule never idles room: with node 1 full the 1-GPU job runs on node 0."""
    assert _node_of_next(CycleConfig(profile(), reserve=False), small_node_full=True) == 0


def test_the_ladder_spares_the_homes_of_fewer_homed_shapes_only() -> None:
    c = cluster(
        node("big", cpu=128_000, mem=512_000),
        node("a100", cpu=64_000, mem=512_000, model="A100"),
        node("v100", cpu=64_000, mem=512_000, model="V100"),
    )
    pinned = task(gpus=1, models=("V100",))  # one home: node 2
    index = HomeIndex(c.specs, profile())
    ladder = HomeLadder.of(index, c, [(WIDE, 1), (pinned, 1), (SMALL, 1)])
    assert ladder.counts == (1,)  # WIDE and the pinned task: one home each; SMALL's three are not scarce
    spared = ladder.spared_from(index, c, SMALL)
    assert spared is not None and spared.tolist() == [True, False, True]
    # Equally constrained shapes compete as before: neither spares the other's home.
    assert ladder.spared_from(index, c, WIDE) is None
    assert ladder.spared_from(index, c, pinned) is None


def test_on_equal_nodes_nothing_is_spared() -> None:
    """Philly's nodes are all alike: every shape has every node for a home, so the rule is inert."""
    c = cluster(node("a"), node("b"))
    index = HomeIndex(c.specs, profile())
    ladder = HomeLadder.of(index, c, [(task(gpus=8), 1), (SMALL, 1), (task(gpus=2), 1)])
    assert ladder.spared_from(index, c, SMALL) is None


def test_homes_are_scarce_up_to_two_per_replica_needed() -> None:
    """Three nodes can hold a 4-GPU task: plenty for one replica, scarce for a gang of two."""
    c = cluster(node("a"), node("b"), node("c"), node("small", gpus=2))
    index = HomeIndex(c.specs, profile())
    four = task(gpus=4)
    assert HomeLadder.of(index, c, [(four, 1), (SMALL, 1)]).spared_from(index, c, SMALL) is None
    spared = HomeLadder.of(index, c, [(four, 2), (SMALL, 1)]).spared_from(index, c, SMALL)
    assert spared is not None and spared.tolist() == [True, True, True, False]


def test_the_scarce_waiting_jobs_followed_through_a_delta_are_those_judged_afresh() -> None:
    c = cluster(
        node("big", cpu=128_000, mem=512_000),
        node("a100", cpu=64_000, mem=512_000, model="A100"),
        node("v100", cpu=64_000, mem=512_000, model="V100"),
    )
    wide, small = job("wide", shape=WIDE), job("small", shape=SMALL)
    pinned = job("pinned", shape=task(gpus=1, models=("V100",)))
    kept = HomeIndex(c.specs, profile())
    kept.rebuild(c, [wide, small], generation=1)
    assert set(kept.scarce) == {"wide"}
    kept.follow(c, PendingDelta(2, 1, frozenset({"wide"}), (pinned,)))
    fresh = HomeIndex(c.specs, profile())
    fresh.rebuild(c, [small, pinned], generation=2)
    assert kept.scarce == fresh.scarce == {"pinned": (pinned.shape, 1)}
    assert kept.generation == fresh.generation == 2
