"""Preemptors sharing a node (``shared/core/actions/stacking.py``), on random busy clusters.

Every search reads the room the cycle keeps and updates node by node; it must be the room a
fresh look gives.  And whatever the cycle ends with, the preemptors waiting on a node are owed
no more than is free there or being freed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from shared.core.actions import preempt, stacking
from shared.core.actions.context import CycleContext
from shared.core.cluster import ClusterState, IntArray
from shared.core.cycle import CycleConfig, Preempt, Resize, Snapshot, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.jobs import Job, Reservation, Running
from shared.core.registry import build_profile
from tests.unit.builders import node, task

SHAPES = [task(gpus=g) for g in (1, 2, 4)]


def _world(seed: int) -> tuple[Snapshot, CycleConfig]:
    rng = np.random.default_rng(seed)
    c = ClusterState([node(f"n{i}", gpus=int(g)) for i, g in enumerate(rng.choice([4, 8], size=6))])
    running: list[Running] = []
    for k in range(60):  # best-effort work, as much as fits; elastic jobs among it
        shape = SHAPES[int(rng.integers(3))]
        replicas = int(rng.integers(1, 3))
        elastic = replicas > 1 and rng.random() < 0.5
        j = Job(
            f"r{k}", "q", "t", shape, replicas=replicas, priority=-100, checkpointable=True, submitted=0.0
        )
        if elastic:
            j = replace(j, min_replicas=1)
        spots = [
            n for n in range(c.size) for _ in range(8) if c.gpu_free[n].tolist().count(1000) >= shape.num_gpu
        ]
        if len(spots) < replicas:
            continue
        placements = []
        for n in rng.choice(spots, size=replicas, replace=False).tolist():
            free = [g for g, m in enumerate(c.gpu_free[n].tolist()) if m == 1000][: shape.num_gpu]
            if len(free) < shape.num_gpu:
                break
            placements.append(c.place(n, shape, tuple(free)))
        if len(placements) < replicas:
            for p in placements:
                c.remove(p)
            continue
        r = Running(j, tuple(placements), 0.0)
        if rng.random() < 0.15:
            r = replace(r, preempting=True, leaving=replicas)
        running.append(r)
    pending = [
        Job(f"p{k}", "q", "t", SHAPES[int(rng.integers(3))], priority=100, submitted=float(k))
        for k in range(12)
    ]
    # A few preemptors already wait on the nodes of leaving jobs.
    reservations: dict[str, Reservation] = {}
    leaving = [r for r in running if r.leaving]
    for k, r in enumerate(leaving[:3]):  # each waits for its victim's room: a replica's shape
        pending[k] = replace(pending[k], shape=r.job.shape)
        nodes = tuple(sorted({p.node for p in r.placements}))
        reservations[pending[k].id] = Reservation(pending[k].id, nodes, 1.0, 30.0, 9000.0, preemption=True)
    profile = build_profile("bestfit", TypicalWorkload.from_tasks(SHAPES, coverage=1.0))
    return Snapshot(c, pending, running, reservations=reservations), CycleConfig(profile)


Stacked = Callable[[CycleContext, IntArray, IntArray, IntArray], object]


@pytest.mark.parametrize("seed", range(40))
def test_the_room_kept_through_a_cycle_is_what_a_fresh_look_gives(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot, config = _world(seed)
    calls = []
    kept: Stacked = stacking.stacked_room

    def checked(ctx: CycleContext, cpu: IntArray, mem: IntArray, gpu: IntArray) -> object:
        offered = kept(ctx, cpu, mem, gpu)
        fresh = stacking.SharedRoom()
        fresh.update(ctx, None)
        assert isinstance(ctx.shared_room, stacking.SharedRoom)
        assert ctx.shared_room.left == fresh.left
        calls.append(sum(room is not None for room in fresh.left.values()))
        return offered

    monkeypatch.setattr(preempt, "stacked_room", checked)
    result = run_cycle(snapshot, config, 5000.0, np.random.default_rng(seed))
    assert calls  # the preemptors searched

    # What the cycle ends with: on every node preemptors hold, their claims fit in the room free
    # there plus what leaves (the snapshot's leaving tasks, and those this cycle evicts or shrinks).
    c = snapshot.cluster.copy()
    for placements in result.placed.values():
        for p in placements:
            c.place(p.node, p.task, p.gpus)
    evicted = {i.victim for i in result.of(Preempt)}
    shrunk = {i.job: len(i.removed) for i in result.of(Resize)}
    free = {n: (int(c.cpu_free[n]), int(c.mem_free[n]), c.gpu_free[n].tolist()) for n in range(c.size)}
    for r in snapshot.running:
        out = r.replicas if r.job.id in evicted else r.leaving + shrunk.get(r.job.id, 0)
        for p in r.placements[r.replicas - out :]:
            cpu, mem, gpus = free[p.node]
            for g in p.gpus:
                gpus[g] += p.task.gpu_milli
            free[p.node] = (cpu + p.task.cpu_milli, mem + p.task.memory_mib, gpus)
    pending = {j.id: j for j in snapshot.pending}
    for held in sorted(result.reservations.values(), key=lambda h: (h.since, h.job)):
        if not held.preemption or len(held.nodes) != 1:
            continue
        n = held.nodes[0]
        room = stacking._take_room(pending[held.job], free[n])
        assert room is not None, (held, free[n])
        free[n] = room
