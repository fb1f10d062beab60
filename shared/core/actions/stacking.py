"""Preemptors sharing a node: what one more preemptor may count on where others already wait.

A preemption reservation used to close its node to every other preemptor, so a queue reclaiming
many 1-GPU jobs got one eviction per node per round, a round lasting as long as the victims take
to stop (16 GPUs on 4 nodes of 8: 4 rounds, two minutes at a 30 s grace).  Kubernetes lets
several nominated pods share a node the same way: each counts the room of those nominated before
it as taken.

On a node that only preemption reservations hold, a newcomer may count on the room free now,
plus what tasks on their way out free (evicted jobs, the top replicas of shrinking ones), less
what each holder claims there, in the order they reserved.  A reservation does not say how many
of its replicas go to each of its nodes, so a holder claims on every one of them as many
replicas as fit there, up to its fewest: more than it will take when its replicas span nodes,
never less.  A node whose claims no longer fit (its room went elsewhere) is not offered.  A node
that also holds a gang's or EASY's reservation is never offered.

The room is worked out once per cycle and then only for the nodes whose holders or leaving tasks
changed (the context's ``changed_holds``): a preemption storm holds hundreds of nodes, and each
preemptor's search reads them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shared.core.actions.context import CycleContext
from shared.core.actions.reserve import fit_count
from shared.core.cluster import BoolArray, IntArray, Placement
from shared.core.jobs import Job

Room = tuple[int, int, list[int]]
"""A node's milli-CPU, MiB and per-GPU milli."""


def take(job: Job, node: int, cpu: IntArray, mem: IntArray, gpu: IntArray) -> None:
    """Take one replica's room on ``node`` in a virtual free state (best-fit GPU choice)."""
    shape = job.shape
    cpu[node] -= shape.cpu_milli
    mem[node] -= shape.memory_mib
    row = gpu[node]
    if shape.is_shared:
        fits = np.where(row >= shape.gpu_milli, row, np.iinfo(np.int64).max)
        row[int(np.argmin(fits))] -= shape.gpu_milli
    elif shape.num_gpu:
        free = np.flatnonzero(row == 1000)[: shape.num_gpu]
        row[free] = 0


def freed(room: Room, p: Placement) -> Room:
    """``room`` with what the task ``p`` holds given back (its per-GPU list is updated in place)."""
    cpu, mem, gpus = room
    for g in p.gpus:
        gpus[g] += p.task.gpu_milli
    return cpu + p.task.cpu_milli, mem + p.task.memory_mib, gpus


def _take_room(job: Job, room: Room) -> Room | None:
    """``room`` less one replica of ``job``, or None if it does not fit."""
    cpu, mem, gpus = room
    if fit_count(cpu, mem, gpus, job.shape) < 1:
        return None
    c, m, g = np.array([cpu]), np.array([mem]), np.array([gpus], dtype=np.int64)
    take(job, 0, c, m, g)
    return int(c[0]), int(m[0]), g[0].tolist()


@dataclass
class SharedRoom:
    """Per node only preemptors hold: the room left for one more (None: the claims do not fit)."""

    left: dict[int, Room | None] = field(default_factory=dict)

    def update(self, ctx: CycleContext, nodes: set[int] | None) -> None:
        """Work out ``nodes`` again (None: every node)."""
        size = ctx.cluster.size
        holders: dict[int, list[Job]] = {}
        closed: set[int] = set()
        for held in sorted(ctx.reservations.values(), key=lambda h: (h.since, h.job)):
            for node in held.nodes:
                if not 0 <= node < size or (nodes is not None and node not in nodes):
                    continue
                if not held.preemption:
                    closed.add(node)
                else:
                    holders.setdefault(node, []).append(ctx.pending_by_id[held.job])
        if nodes is None:
            self.left.clear()
        for node in nodes or ():
            self.left.pop(node, None)
        c = ctx.cluster
        for node, jobs in holders.items():
            if node in closed or not c.schedulable[node]:
                continue
            self.left[node] = _left_on(ctx, node, jobs)

    def apply(self, cpu: IntArray, mem: IntArray, gpu: IntArray) -> BoolArray:
        """Write the room left into the free arrays; the nodes offered."""
        offered = np.zeros(len(cpu), dtype=np.bool_)
        for node, room in self.left.items():
            if room is None:
                continue
            offered[node] = True
            cpu[node], mem[node] = room[0], room[1]
            gpu[node, : len(room[2])] = room[2]
        return offered


def _left_on(ctx: CycleContext, node: int, holders: list[Job]) -> Room | None:
    c = ctx.cluster
    free: Room = (int(c.cpu_free[node]), int(c.mem_free[node]), c.gpu_free[node].tolist())
    for p in ctx.leaving_on(node):
        free = freed(free, p)
    cap = (int(c.cpu_cap[node]), int(c.mem_cap[node]), c.gpu_cap[node].tolist())
    room: Room | None = free
    for holder in holders:
        for _ in range(min(holder.fewest, fit_count(*cap, holder.shape))):
            if room is None:
                return None
            room = _take_room(holder, room)
    return room


def stacked_room(ctx: CycleContext, cpu: IntArray, mem: IntArray, gpu: IntArray) -> BoolArray:
    """The nodes only preemptors hold that one more preemptor may use, with the room left there
    written into the free arrays ``cpu``, ``mem`` and ``gpu`` (copies of the cycle's)."""
    found = ctx.shared_room
    if not isinstance(found, SharedRoom):
        found = SharedRoom()
        found.update(ctx, None)
        ctx.shared_room = found
    elif ctx.changed_holds:
        found.update(ctx, ctx.changed_holds)
    ctx.changed_holds = set()
    return found.apply(cpu, mem, gpu)
