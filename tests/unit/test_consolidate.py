"""Consolidation: small checkpointable jobs move to free room so a blocked large job fits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig, CycleResult, Place, Preempt, Snapshot, run_cycle
from shared.core.jobs import Job, Running
from shared.core.plugins.order.fifo import Fifo
from shared.settings import Settings
from tests.unit.builders import cluster, node, worker_config
from tests.unit.test_cycle import job, profile, running

NOW = 10_000.0


def _scattered(checkpointable: bool = True, started: float = 0.0) -> tuple[ClusterState, list[Running]]:
    """Three 4-GPU nodes, each with one long 1-GPU job: 9 GPUs free, no node whole."""
    c = cluster(node("a", gpus=4), node("b", gpus=4), node("c", gpus=4))
    hold = [
        running(c, job(f"small{n}", checkpointable=checkpointable, duration_s=1e9), [(n, (0,))], started)
        for n in range(3)
    ]
    return c, hold


def _cycle(c: ClusterState, pending: list[Job], hold: list[Running], **kw: object) -> CycleResult:
    config = CycleConfig(profile(), order=Fifo(), fair_share=False, **kw)  # type: ignore[arg-type]
    return run_cycle(Snapshot(c, pending, hold), config, NOW, np.random.default_rng(0))


def test_a_gang_blocked_by_scattered_small_jobs_has_them_moved_to_free_room() -> None:
    c, hold = _scattered()
    gang = job("gang", gpus=4, replicas=2)  # two whole nodes; 9 GPUs are free, no node is whole
    result = _cycle(c, [gang], hold)
    moves = result.of(Preempt)
    assert len(moves) == 2 and all(p.reason == "consolidation" and p.by == "gang" for p in moves)
    assert all(p.grace_s == CycleConfig(profile()).grace_s for p in moves)
    held = result.reservations["gang"]
    assert held.preemption and len(held.nodes) == 2  # its room alone, as soon as they are gone
    moved = {p.victim for p in moves}
    stays = next(r for r in hold if r.job.id not in moved)
    assert stays.placements[0].node not in held.nodes  # the third node takes the two that move
    assert not result.of(Place)


def test_a_mover_is_placed_again_on_the_room_it_was_promised() -> None:
    """Carrying the plan out: once the movers left, the gang and both movers fit at once."""
    c, hold = _scattered()
    gang = job("gang", gpus=4, replicas=2)
    result = _cycle(c, [gang], hold)
    moved = {p.victim for p in result.of(Preempt)}
    after = c.copy()
    for r in hold:
        if r.job.id in moved:
            for p in r.placements:
                after.remove(p)
    left = [r for r in hold if r.job.id not in moved]
    back = [r.job for r in hold if r.job.id in moved]
    second = run_cycle(
        Snapshot(after, [gang, *back], left, reservations=result.reservations),
        CycleConfig(profile(), order=Fifo(), fair_share=False),
        NOW + 60.0,
        np.random.default_rng(0),
    )
    assert set(second.placed) == {"gang", *moved}


def test_jobs_that_cannot_checkpoint_never_move() -> None:
    c, hold = _scattered(checkpointable=False)
    result = _cycle(c, [job("gang", gpus=4, replicas=2)], hold)
    assert not result.of(Preempt)
    assert not result.reservations["gang"].preemption  # it waits for its room as before


def test_nothing_moves_when_the_movers_would_find_no_room_elsewhere() -> None:
    c, hold = _scattered()
    # A gang of three whole nodes: every node must be emptied, so the movers have nowhere to go.
    result = _cycle(c, [job("gang", gpus=4, replicas=3)], hold)
    assert not result.of(Preempt)


def test_moves_serve_jobs_far_larger_than_what_they_move() -> None:
    c, hold = _scattered()
    one_node = job("four", gpus=4)  # needs one whole node: moving 1 GPU is a quarter of it
    assert [p.victim for p in _cycle(c, [one_node], hold).of(Preempt)] == ["small0"]
    assert not _cycle(c, [one_node], hold, consolidate_share=0.2).of(Preempt)
    assert not _cycle(c, [one_node], hold, consolidate=False).of(Preempt)


def test_young_jobs_and_jobs_at_their_preemption_limit_stay() -> None:
    c, hold = _scattered(started=NOW - 60.0)
    assert not _cycle(c, [job("four", gpus=4)], hold).of(Preempt)
    c, hold = _scattered()
    limit = CycleConfig(profile()).max_preemptions
    tired = [replace(r, job=replace(r.job, preemptions=limit)) for r in hold]
    assert not _cycle(c, [job("four", gpus=4)], tired).of(Preempt)


async def test_the_placement_workers_run_it_unless_the_setting_turns_it_off() -> None:
    for setting, expected in ((Settings(), True), (Settings(consolidate=False), False)):
        assert (await worker_config(setting)).consolidate is expected


async def test_the_placement_workers_take_the_preemption_settings() -> None:
    config = await worker_config(
        Settings(
            preempt_max_per_job=1, preempt_restart_overhead_s=5, preempt_min_runtime_s=7, preempt_grace_s=9
        )
    )
    assert (config.max_preemptions, config.restart_overhead_s, config.min_runtime_s, config.grace_s) == (
        1,
        5.0,
        7.0,
        9.0,
    )
