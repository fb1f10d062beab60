"""Stage 3, preempt and reclaim: make room for blocked jobs by evicting (or shrinking) others.

1. The blocked jobs are taken in allocate's order, at most ``max_preemptors`` per cycle; one
   whose victims are already leaving waits for them (its preemption reservation).
2. Who may be evicted for a job J (every rule must hold):
   * not J, not already leaving, started at least ``min_runtime_s`` ago, preempted fewer than
     ``max_preemptions`` times (a job cannot be bounced forever: Kueue #3779, Volcano #4808);
     a checkpointable elastic job may be *shrunk* however young: a shrink keeps it running and
     costs it one restart, while ``min_runtime_s`` protects a start from an eviction that puts
     the job back in the queue (and room a job grew into is then given back when wanted);
   * and one of: **priority** (same queue, strictly lower priority); **starvation** (J waited past
     its queue's ``preempt-after``: strictly lower priority anywhere); **reclaim** (J's queue stays
     within its guarantee with J, the victim's queue uses more than its own guarantee and
     stays at or above it after the eviction, and the victim's priority is not above J's); or, for a
     preemptive order (LAS), a strictly lower rank.
   Never for a job of equal or lower priority, except reclaim, which takes borrowed room back
   at equal priority (a queue's guarantee would otherwise depend on its borrowers finishing).
3. Units of eviction: a whole victim job (all its tasks, a gang is never cut), or one replica of
   an elastic job above its minimum (a *shrink*: no work is lost).
4. For each replica of J, every node that could hold it once its eligible units left is
   scored by the units it needs, chosen cheapest first: (highest victim priority, GPU-seconds
   lost, number of victim jobs, whole evictions, GPU left over on the node, evictions the
   victims already had); the lowest wins (the issue's order: priority, work lost since the last
   checkpoint, victims, fragmentation; at a tie a shrink beats an eviction, which matters for
   CPU jobs, whose GPU-seconds lost are always 0, and the victims evicted least so far go first,
   ``spread_evictions``: a job at ``max_preemptions`` pins its node against every later
   preemptor).  A job is either shrunk or evicted, never both at once.  A checkpointable
   victim checkpoints within its grace and loses only ``restart_overhead_s`` per GPU; any other
   loses everything since it started.
5. Worth it (``weigh_loss``): the eviction goes ahead only if the work the victims lose is no
   more than the preemptor's wait costs, both as dominant-share-seconds: a job's largest share
   of the cluster's GPUs, CPUs or memory, times seconds (:func:`_worth_it`).
6. The victims' evictions and J's reservation of the nodes (``preemption``: it starts as soon as
   they are gone) are the intents; nothing is placed yet.  Nodes other preemptors hold stay open
   to J for what is left after their claims (``stacking.py``).  Victims' usage leaves their queues at
   once and the preemptor's joins its own, so later preemptors in the same cycle see what is
   already being freed; later cycles count the same (enqueue: a job's tasks on their way out,
   ``Running.leaving``, are no longer its queue's; a preemptor holding its victims' room is).
   Counted as before, a borrower whose victims took a second to stop still looked over its
   guarantee, and each cycle in between reclaimed again for the same shortfall.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.core.actions import reserve
from shared.core.actions.context import CycleContext, ReleaseRow, release_row
from shared.core.actions.reserve import fit_count
from shared.core.actions.stacking import freed, stacked_room, take
from shared.core.cluster import BoolArray, IntArray, Placement
from shared.core.cycle import Preempt, Resize, Snapshot
from shared.core.fragmentation import FloatArray
from shared.core.framework import Code
from shared.core.jobs import Job, Reservation, Running
from shared.core.memo import RunningDelta
from shared.core.task import TaskShape

MAX_NODES_EXAMINED = 16
"""Nodes examined exactly per replica, the most promising first: by the lowest priority among
their eligible victims, then the least work those victims would lose."""


@dataclass(frozen=True, slots=True)
class Unit:
    """What one eviction takes: a whole job, or one task of an elastic job (a shrink)."""

    running: Running
    task: int  # -1: the whole job
    lost_gpu_s: float
    priority: int
    lost_share_s: float = 0.0
    """The work lost as dominant-share-seconds (what :func:`_worth_it` weighs): counts a CPU
    job's lost work, which its GPU-seconds (0) do not."""

    @property
    def job_id(self) -> str:
        return self.running.job.id

    @property
    def shrink(self) -> bool:
        return self.task >= 0


class VictimRows:
    """The running tasks laid out as arrays, in the snapshot's order of its running jobs: a pure
    function of that list.  A shell that runs cycle after cycle keeps it in its memo
    (``shared/core/memo.py``) and it follows the snapshot's ``RunningDelta`` (the jobs that left,
    the ones appended), so a cycle pays for the jobs that changed, not for every running task."""

    FACTS = 8  # priority, started, preemptions, fewest, checkpointable, milli-GPU, milli-CPU, MiB

    def __init__(
        self,
        ids: npt.NDArray[np.object_],
        counts: IntArray,
        table: IntArray,
        facts: FloatArray,
        queues: IntArray,
        queue_codes: dict[str, int],
    ) -> None:
        self.ids = ids  # job id per job
        self.counts = counts  # tasks per job
        self.table = table  # per task: index, node, milli-CPU, MiB, milli-GPU
        self.facts = facts  # per job: FACTS
        self.queues = queues  # per job: a code of its queue (queue_codes)
        self.queue_codes = queue_codes  # queue name -> code, only ever grows

    @classmethod
    def of(cls, running: Sequence[Running], queue_codes: dict[str, int] | None = None) -> VictimRows:
        codes = dict(queue_codes or {})
        for r in running:
            codes.setdefault(r.job.queue, len(codes))
        n = len(running)
        ids = np.empty(n, dtype=object)
        ids[:] = [r.job.id for r in running]
        counts = np.fromiter((len(r.placements) for r in running), dtype=np.int64, count=n)
        table = np.array([row for r in running for row in r.task_rows], dtype=np.int64).reshape(-1, 5)
        facts = np.array(
            [
                (
                    r.job.priority,
                    r.started,
                    r.job.preemptions,
                    r.job.fewest,
                    r.job.checkpointable,
                    r.demand[0],
                    r.demand[1],
                    r.demand[2],
                )
                for r in running
            ],
            dtype=np.float64,
        ).reshape(-1, cls.FACTS)
        queues = np.fromiter((codes[r.job.queue] for r in running), dtype=np.int64, count=n)
        return cls(ids, counts, table, facts, queues, codes)

    def follow(self, delta: RunningDelta, running: Sequence[Running]) -> VictimRows:
        """The rows of ``running``, which is this list less ``delta.removed`` plus its last
        ``delta.appended`` entries."""
        keep = np.ones(len(self.ids), dtype=np.bool_)
        if delta.removed:
            where = dict(zip(self.ids.tolist(), range(len(self.ids)), strict=True))
            for job in delta.removed:
                k = where.get(job)
                if k is not None:
                    keep[k] = False
        new = None
        if delta.appended:
            new = VictimRows.of(running[len(running) - delta.appended :], self.queue_codes)
        rows = np.repeat(keep, self.counts)
        parts = [(self.ids[keep], self.counts[keep], self.table[rows], self.facts[keep], self.queues[keep])]
        codes = self.queue_codes
        if new is not None:
            parts.append((new.ids, new.counts, new.table, new.facts, new.queues))
            codes = new.queue_codes
        ids, counts, table, facts, queues = (np.concatenate(col) for col in zip(*parts, strict=True))
        return VictimRows(ids, counts, table.reshape(-1, 5), facts.reshape(-1, self.FACTS), queues, codes)


def follow_memo(snapshot: Snapshot) -> None:
    """Bring the memo's rows to ``snapshot``'s running jobs, or drop them when the delta does not
    start where they are (a later search then lays them out anew)."""
    memo = snapshot.memo
    if memo is None or not isinstance(memo.victim_rows, VictimRows):
        return
    delta = snapshot.running_delta
    if delta is None or delta.previous != memo.generation:
        memo.victim_rows, memo.generation = None, -1
        return
    memo.victim_rows = memo.victim_rows.follow(delta, snapshot.running)
    memo.generation = delta.generation


def _rows(snapshot: Snapshot) -> VictimRows:
    memo, delta = snapshot.memo, snapshot.running_delta
    kept = memo.victim_rows if memo is not None else None
    if (
        isinstance(kept, VictimRows)
        and delta is not None
        and memo is not None
        and memo.generation == delta.generation
    ):
        return kept
    rows = VictimRows.of(snapshot.running)
    if memo is not None and delta is not None:
        memo.victim_rows, memo.generation = rows, delta.generation
    return rows


class VictimIndex:
    """Per cycle, the running tasks as arrays (node, priority, queue, start, ...) so that one
    preemptor's eligible victims and each node's evictable room are a few numpy operations."""

    def __init__(self, ctx: CycleContext) -> None:
        # Built every cycle that looks for victims, over every running task (tens of thousands
        # live): from rows each Running lays out once, kept between cycles where the shell
        # keeps a memo (``VictimRows``); what depends on this cycle is a few numpy operations.
        running = list(ctx.snapshot.running)
        self.running = running
        base = _rows(ctx.snapshot)
        assert len(base.ids) == len(running), "victim rows out of step with the snapshot"
        n_jobs = len(running)
        counts = base.counts
        table, facts = base.table, base.facts
        self.job = np.repeat(np.arange(n_jobs, dtype=np.int64), counts)
        self.task = np.ascontiguousarray(table[:, 0])
        self.node = np.ascontiguousarray(table[:, 1])
        self.cpu = np.ascontiguousarray(table[:, 2])
        self.mem = np.ascontiguousarray(table[:, 3])
        self.gpu = np.ascontiguousarray(table[:, 4])
        # Queues by name order: the codes present, ranked by their names.
        names = {c: q for q, c in base.queue_codes.items()}
        present = np.unique(base.queues).tolist()
        qnames = sorted(names[c] for c in present)
        rank = np.zeros(len(base.queue_codes), dtype=np.int64)
        for i, q in enumerate(qnames):
            rank[base.queue_codes[q]] = i
        self.queue_names = qnames
        self.job_queue = rank[base.queues] if n_jobs else np.zeros(0, dtype=np.int64)
        self.job_priority = facts[:, 0].astype(np.int64)
        self.job_started = np.ascontiguousarray(facts[:, 1])
        self.job_preemptions = facts[:, 2].astype(np.int64)
        self.job_replicas = counts
        self.job_elastic_room = counts - facts[:, 3].astype(np.int64)
        self.job_checkpointable = facts[:, 4] > 0
        self.job_gpu = np.ascontiguousarray(facts[:, 5])
        self.job_cpu = np.ascontiguousarray(facts[:, 6])
        self.job_mem = np.ascontiguousarray(facts[:, 7])
        self.by_id = dict(zip(base.ids.tolist(), range(n_jobs), strict=True))
        # Rows by node and by job, so a node's tasks or a victim's are a slice, not a scan.
        n = ctx.cluster.size
        self._node_order = np.argsort(self.node, kind="stable")
        self._node_start = np.searchsorted(self.node[self._node_order], np.arange(n + 1))
        self._job_start = np.searchsorted(self.job, np.arange(n_jobs + 1))  # rows are by job
        # What evicting each job loses (``_lost``), shared among its tasks, for every job at once.
        gpus = self.job_gpu / 1000.0
        ran = np.maximum(0.0, ctx.now - self.job_started)
        lost = np.where(self.job_checkpointable, ctx.config.restart_overhead_s * gpus, ran * gpus)
        per_job = lost / np.maximum(1, counts)
        self._task_lost: FloatArray = per_job[self.job] if per_job.size else np.zeros(0)
        self._ranks: FloatArray | None = None

    def ranks(self, ctx: CycleContext) -> FloatArray:
        """Per running job, its rank in a preemptive order (LAS: by the service it has had by
        now), worked out once per cycle: it is the same for every preemptor (with ``las`` on
        Philly, asking it per preemptor was a quarter of the run)."""
        if self._ranks is None:
            order, now = ctx.config.order, ctx.now
            had = [r.job.attained_gpu_s + (now - r.started) * r.job.gpus for r in self.running]
            self._ranks = np.array([order.rank(r.job, a) for r, a in zip(self.running, had, strict=True)])
        return self._ranks

    def placement(self, row: int) -> Placement:
        return self.running[int(self.job[row])].placements[int(self.task[row])]

    def task_lost(self, ctx: CycleContext) -> FloatArray:
        """Per task row, its job's GPU-seconds lost if evicted, shared among its tasks."""
        return self._task_lost

    def rows_on(self, node: int) -> IntArray:
        rows: IntArray = self._node_order[self._node_start[node] : self._node_start[node + 1]]
        return rows

    def rows_of_job(self, k: int) -> range:
        return range(int(self._job_start[k]), int(self._job_start[k + 1]))


def run(ctx: CycleContext) -> None:
    cfg = ctx.config
    if not (cfg.preempt or cfg.reclaim or cfg.order.preemptive) or not ctx.snapshot.running:
        return
    tried = 0
    # Victims only get fewer as a cycle goes on, so a preemptor that found none stands for every
    # later one with the same queue, priority, shape, starvation and at least as many replicas.
    # Not for a job that holds a reservation: its own nodes are open to it alone, so a twin's
    # failure says nothing of it, and its failure says nothing of its twins' (its wait is
    # weighed against its own slot).
    failed: dict[tuple[str, int, object, bool], int] = {}
    floor = ctx.lowest
    may: dict[tuple[str, int, object, int, bool], bool] = {}  # _may_preempt, until a preemption commits
    for job in list(ctx.blocked):
        if tried >= cfg.max_preemptors:
            break
        if job.id in ctx.placed or not ctx.actionable(job):
            continue
        if ctx.unschedulable[job.id].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            continue
        held = ctx.reservations.get(job.id)
        if held is not None and held.preemption:
            continue  # its victims are on their way out
        at = ctx.queues.preempt_at(job.queue, job.since) if cfg.preempt else None
        starving = at is not None and ctx.now >= at  # only the priority rule reads it
        key = (job.queue, job.priority, job.shape, starving)
        if held is None and key in failed and job.fewest >= failed[key]:
            continue
        gate = (job.queue, job.priority, job.shape, job.fewest, starving)
        allowed = may.get(gate)
        if allowed is None or ctx.config.order.preemptive:
            allowed = may[gate] = _may_preempt(ctx, job, floor)
        if not allowed:
            continue
        tried += 1
        if preempt_for(ctx, job):
            may.clear()  # shares moved
        elif held is None:
            failed[key] = min(job.fewest, failed.get(key, job.fewest))


def _may_preempt(ctx: CycleContext, job: Job, floor: dict[str, int]) -> bool:
    """A cheap test of whether any rule could let ``job`` evict anything at all."""
    cfg = ctx.config
    if cfg.order.preemptive:
        return True
    if cfg.preempt:
        if job.priority > floor.get(job.queue, job.priority):
            return True
        at = ctx.queues.preempt_at(job.queue, job.since)
        if at is not None and job.priority > floor.get("", job.priority):
            if ctx.now >= at:
                return True
            ctx.wake(at)
    if cfg.reclaim and ctx.within_guarantee(job, job.fewest):
        return any(q != job.queue and ctx.borrowed(q)[0] + ctx.borrowed(q)[1] > 0 for q in ctx.usage)
    return False


def victim_index(ctx: CycleContext) -> VictimIndex:
    """The cycle's :class:`VictimIndex`, built on first use (consolidation reads it too)."""
    if not isinstance(ctx.victims, VictimIndex):
        ctx.victims = VictimIndex(ctx)
    return ctx.victims


def eligible_jobs(ctx: CycleContext, job: Job) -> tuple[BoolArray, list[tuple[str, BoolArray]]]:
    """Per running job: may it be evicted for ``job``; and each rule that let some job be, with
    the jobs it lets (a victim's eviction names the rules that apply to it, not every rule tried)."""
    cfg, now, idx = ctx.config, ctx.now, victim_index(ctx)
    n = len(idx.running)
    base = np.ones(n, dtype=np.bool_)
    old = idx.job_started + cfg.min_runtime_s <= now  # the very sum it wakes at (docs/design.md, intents)
    young = ~old
    if young.any():
        ctx.wake(float(idx.job_started[young].min()) + cfg.min_runtime_s)
    for j in ctx.evicting:
        k = idx.by_id.get(j)
        if k is not None:
            base[k] = False
    me = idx.by_id.get(job.id)
    if me is not None:
        base[me] = False
    ok = np.zeros(n, dtype=np.bool_)
    reasons: list[tuple[str, BoolArray]] = []

    def rule(name: str, lets: BoolArray) -> None:
        nonlocal ok
        if lets.any():
            ok = ok | lets
            reasons.append((name, lets))

    if cfg.order.preemptive:
        mine = cfg.order.rank(job, job.attained_gpu_s)
        rule(cfg.order.name, idx.ranks(ctx) < mine)
    if cfg.preempt:
        lower = idx.job_priority < job.priority
        own_q = np.array([q == job.queue for q in idx.queue_names], dtype=np.bool_)
        same = own_q[idx.job_queue] if idx.queue_names else np.zeros(n, dtype=np.bool_)
        rule("priority", lower & same)
        at = ctx.queues.preempt_at(job.queue, job.since)
        if at is not None:
            if now >= at:
                rule("starvation", lower & ~same)
            else:
                ctx.wake(at)
    if cfg.reclaim and ctx.within_guarantee(job, job.fewest):
        # A victim of another queue is on borrowed room if its queue stays at or above its
        # guarantee without it, in every dimension the reclaimer needs.
        s = job.shape
        needs = (s.total_gpu_milli > 0, s.cpu_milli > 0, s.memory_mib > 0)
        spare = np.array([ctx.borrowed(q) if q != job.queue else (-1.0, -1.0, -1.0) for q in idx.queue_names])
        if spare.size:
            rows = spare[idx.job_queue]
            fits = np.ones(n, dtype=np.bool_)
            lent = np.zeros(n, dtype=np.bool_)
            for d, demand in enumerate((idx.job_gpu, idx.job_cpu, idx.job_mem)):
                if needs[d]:
                    fits &= rows[:, d] >= demand - 1e-9
                    lent |= rows[:, d] > 1e-9
            rule("reclaim", fits & lent & (idx.job_priority <= job.priority))
    shrinkable = (idx.job_elastic_room > 0) & (old | idx.job_checkpointable)
    # A job bounced max_preemptions times is not evicted again; shrinking it is no preemption.
    whole_ok = ok & base & old & (idx.job_preemptions < cfg.max_preemptions)
    return whole_ok | (ok & base & shrinkable), reasons


def _lost_s(ctx: CycleContext, r: Running) -> float:
    """Seconds of ``r``'s work an eviction loses: one restart if it checkpoints, else all of it."""
    if r.job.checkpointable:
        return ctx.config.restart_overhead_s
    return max(0.0, ctx.now - r.started)


def preempt_for(ctx: CycleContext, job: Job) -> bool:
    """Find victims for ``job``'s fewest replicas; on success append the intents."""
    idx = victim_index(ctx)
    ok, reasons = eligible_jobs(ctx, job)
    if not ok.any():
        return False
    cfg, c = ctx.config, ctx.cluster
    task_ok = ok[idx.job]
    # Free state as victims (virtually) leave; nothing in the cluster copy changes.
    cpu_free, mem_free, gpu_free = c.cpu_free.copy(), c.mem_free.copy(), c.gpu_free.copy()
    allowed = ctx.open_to(job)
    if cfg.share_preempted_nodes:
        allowed = allowed | stacked_room(ctx, cpu_free, mem_free, gpu_free)
    allowed = allowed & cfg.profile.could_ever_fit(c, job.shape)
    chosen: dict[str, Unit] = {}
    nodes: list[int] = []
    for _ in range(job.fewest):
        pick = _best_node(ctx, job, idx, task_ok, allowed, chosen, cpu_free, mem_free, gpu_free)
        if pick is None:
            return False
        node, units = pick
        for u in units:
            chosen[u.job_id if not u.shrink else f"{u.job_id}#{u.task}"] = u
            _free(idx, u, cpu_free, mem_free, gpu_free)
        take(job, node, cpu_free, mem_free, gpu_free)
        nodes.append(node)
    if cfg.weigh_loss and not _worth_it(ctx, job, sum(u.lost_share_s for u in chosen.values())):
        return False

    def why(r: Running) -> str:
        k = idx.by_id[r.job.id]
        return "+".join(name for name, lets in reasons if lets[k])

    commit(ctx, job, chosen, tuple(sorted(set(nodes))), why)
    return True


def _worth_it(ctx: CycleContext, job: Job, lost_share_s: float) -> bool:
    """Whether evicting victims that would lose ``lost_share_s`` beats waiting for room.

    Both sides are measured as dominant-share-seconds (DRF's measure of a job's size: its
    largest share of the cluster's GPUs, CPUs or memory, times seconds), so a CPU job's work
    and wait count as a GPU job's do; among GPU-bound jobs it is GPU-seconds over the cluster's
    GPUs.  (GPU-seconds alone made a CPU victim lose "nothing" and a CPU preemptor's wait cost
    "nothing".)  Waiting costs the job its size for its whole wait: the time it has waited plus the time
    until its earliest slot by the run-time estimates (the slot a reservation would hold).
    Counting the wait so far keeps an estimate that keeps sliding ("room in ten minutes", for
    hours) from holding a job back forever.  Evicting costs the victims the work they lose.
    Checkpointable victims lose one restart and almost always pass; a non-checkpointable
    victim that ran for hours is not killed for a job that just arrived and whose room frees in
    minutes (on openb, where best-effort pods cannot checkpoint, evicting them at once cost
    them more than it gained the high-priority pods, whose waits it did not shorten).  Reclaim
    for a queue within its guarantee is a promise and always passes, as does a job that would
    never fit without evictions."""
    if lost_share_s <= 0.0:
        return True
    if ctx.config.reclaim and ctx.within_guarantee(job, job.fewest):
        return True
    s = job.shape
    size = ctx.dominant((s.total_gpu_milli * job.fewest, s.cpu_milli * job.fewest, s.memory_mib * job.fewest))
    waited = max(0.0, ctx.now - job.since)

    def pays(start: float) -> bool:
        """Whether waiting until ``start`` costs at least what the victims would lose."""
        return (max(0.0, start - ctx.now) + waited) * size >= lost_share_s

    if pays(ctx.now):
        return True  # the wait so far is enough: no need to look for the earliest slot
    held = ctx.reservations.get(job.id)
    if held is not None and not held.preemption:
        return pays(held.expected_start)
    nodes = reserve.candidates(ctx, job)
    if pays(_slot_bound(ctx, job, nodes)):
        return True  # even the soonest any room could come is late enough: no search
    found = reserve.earliest(ctx, job, nodes)
    return found is None or pays(found[1])


def _slot_bound(ctx: CycleContext, job: Job, nodes: IntArray) -> float:
    """A lower bound on the job's earliest slot among ``nodes``: now if the filters let one of
    them hold a replica now, else the first moment any of them frees anything.  A few vector
    operations against the slot search's replay."""
    if nodes.size == 0:
        return float("inf")
    if ctx.config.profile.feasible(ctx.cluster, job.shape)[0][nodes].any():
        return ctx.now
    index = reserve.release_index(ctx)
    return min((index[n][0][0] for n in nodes.tolist() if n in index), default=float("inf"))


def _candidate_units(
    ctx: CycleContext, idx: VictimIndex, node: int, task_ok: BoolArray, chosen: dict[str, Unit]
) -> list[Unit]:
    """What could leave ``node``, cheapest first.  An elastic job above its minimum offers
    shrinks: its highest-numbered tasks, in turn from the top, while they are on this node and
    above its minimum (a shrink stops the highest-numbered replicas, so the others keep their
    numbers).  It also offers its whole eviction, after its shrinks (a shrink loses no work);
    :func:`_units_until_fit` never takes both."""
    rows = idx.rows_on(node)
    rows = rows[task_ok[rows]]
    units: dict[str, Unit] = {}
    here: dict[int, set[int]] = {}  # elastic job -> its tasks on this node
    for row in rows.tolist():
        k = int(idx.job[row])
        r = idx.running[k]
        if r.job.id in chosen:
            continue
        if idx.job_elastic_room[k] > 0:
            here.setdefault(k, set()).add(int(idx.task[row]))
            gone = sum(1 for key in chosen if key.startswith(f"{r.job.id}#"))
            young = idx.job_started[k] + ctx.config.min_runtime_s > ctx.now
            if r.job.preemptions >= ctx.config.max_preemptions or gone or young:
                continue  # shrinks only
        if r.job.id not in units:
            secs = _lost_s(ctx, r)  # GPU-seconds order the victims, dominant shares weigh them
            units[r.job.id] = Unit(
                r, -1, secs * r.demand[0] / 1000.0, r.job.priority, secs * ctx.dominant(r.demand)
            )
    for k, tasks in here.items():
        r = idx.running[k]
        gone = sum(1 for key in chosen if key.startswith(f"{r.job.id}#"))
        top = r.replicas - 1 - gone
        while top in tasks and top >= r.job.fewest:
            units[f"{r.job.id}#{top}"] = Unit(r, top, 0.0, r.job.priority)
            top -= 1
    spread = ctx.config.spread_evictions

    def cheapest(u: Unit) -> tuple[float, float, int, str, bool, int]:
        worn = u.running.job.preemptions if spread else 0
        return (u.priority, u.lost_gpu_s, worn, u.job_id, not u.shrink, -u.task)

    return sorted(units.values(), key=cheapest)


def _units_until_fit(
    idx: VictimIndex,
    node: int,
    units: list[Unit],
    shape: TaskShape,
    cpu: int,
    mem: int,
    gpu: list[int],
) -> tuple[list[Unit], int] | None:
    """The first units, in order, whose leaving lets one replica of ``shape`` fit on ``node``;
    with the GPU milli then left free.  A job's whole eviction is skipped once one of its
    shrinks is taken (it cannot be both shrunk and evicted), so a second pass without shrinks
    covers the case where shrinking it is not enough but evicting it is."""
    for allow_shrink in (True, False):
        c, m, g = cpu, mem, list(gpu)
        taken: list[Unit] = []
        shrunk: set[str] = set()
        fit = fit_count(c, m, g, shape) >= 1
        for u in units:
            if fit:
                break
            if u.shrink and not allow_shrink:
                continue
            if not u.shrink and u.job_id in shrunk:
                continue
            taken.append(u)
            if u.shrink:
                shrunk.add(u.job_id)
            for row in _rows_of(idx, u, node):
                c, m, g = freed((c, m, g), idx.placement(row))
            fit = fit_count(c, m, g, shape) >= 1
        if fit:
            return taken, sum(g) - shape.total_gpu_milli
        if not any(u.shrink for u in units):
            return None
    return None


def _best_node(
    ctx: CycleContext,
    job: Job,
    idx: VictimIndex,
    task_ok: BoolArray,
    allowed: BoolArray,
    chosen: dict[str, Unit],
    cpu_free: IntArray,
    mem_free: IntArray,
    gpu_free: IntArray,
) -> tuple[int, list[Unit]] | None:
    shape = job.shape
    # Room if every eligible task on the node left: a cheap test that rules most nodes out.
    n = ctx.cluster.size
    sel = task_ok
    ev_cpu = np.bincount(idx.node[sel], weights=idx.cpu[sel], minlength=n)
    ev_mem = np.bincount(idx.node[sel], weights=idx.mem[sel], minlength=n)
    ev_gpu = np.bincount(idx.node[sel], weights=idx.gpu[sel], minlength=n)
    enough = (
        allowed
        & (cpu_free + ev_cpu >= shape.cpu_milli)
        & (mem_free + ev_mem >= shape.memory_mib)
        & (gpu_free.sum(axis=1) + ev_gpu >= shape.total_gpu_milli)
    )
    cand = np.flatnonzero(enough)
    if cand.size == 0:
        return None
    # Most promising first: the node's lowest eligible victim priority, then the least work its
    # eligible victims would lose in all (the exact search below then prices each node).
    low = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(low, idx.node[sel], idx.job_priority[idx.job[sel]])
    lost = np.bincount(idx.node[sel], weights=idx.task_lost(ctx)[sel], minlength=n)
    order = np.lexsort((lost[cand], low[cand]))
    best: tuple[tuple[float, float, int, int, int, int], int, list[Unit]] | None = None
    spread = ctx.config.spread_evictions
    for node in cand[order][:MAX_NODES_EXAMINED].tolist():
        cpu, mem, gpu = int(cpu_free[node]), int(mem_free[node]), gpu_free[node].tolist()
        if fit_count(cpu, mem, gpu, shape) >= 1:  # fits already: no victim needed here
            taken: list[Unit] = []
            left = sum(gpu) - shape.total_gpu_milli
        else:
            units = _candidate_units(ctx, idx, node, task_ok, chosen)
            found = _units_until_fit(idx, node, units, shape, cpu, mem, gpu)
            if found is None:
                continue
            taken, left = found
        cost = (
            float(max((u.priority for u in taken), default=-(10**9))),
            sum(u.lost_gpu_s for u in taken),
            len({u.job_id for u in taken}),  # victims: jobs touched (two shrinks of one job: one)
            sum(1 for u in taken if not u.shrink),  # at a tie, shrink rather than evict
            left,
            # at a tie, the victims evicted least so far (spread_evictions): each job evicted
            # max_preemptions times pins its node against every later preemptor
            sum(u.running.job.preemptions for u in taken if not u.shrink) if spread else 0,
        )
        if best is None or cost < best[0]:
            best = (cost, node, taken)
    return None if best is None else (best[1], best[2])


def _rows_of(idx: VictimIndex, u: Unit, node: int | None = None) -> list[int]:
    return [
        row
        for row in idx.rows_of_job(idx.by_id[u.job_id])
        if (not u.shrink or idx.task[row] == u.task) and (node is None or idx.node[row] == node)
    ]


def _free(idx: VictimIndex, u: Unit, cpu: IntArray, mem: IntArray, gpu: IntArray) -> None:
    for row in _rows_of(idx, u):
        p = idx.placement(row)
        cpu[p.node] += p.task.cpu_milli
        mem[p.node] += p.task.memory_mib
        for g in p.gpus:
            gpu[p.node, g] += p.task.gpu_milli


def release_nodes(ctx: CycleContext, nodes: set[int], idx: VictimIndex) -> None:
    """Rebuild ``ctx.release`` for ``nodes`` exactly as :func:`reserve.release_index` builds it:
    the running tasks there (those leaving end within the grace), then what this cycle placed."""
    assert ctx.release is not None
    placed_on: dict[int, list[ReleaseRow]] = {}
    for job_id, placements in ctx.placed.items():
        end = ctx.placed_until(job_id)
        for p in placements:
            if p.node in nodes:
                placed_on.setdefault(p.node, []).append(release_row(end, p))
    for node in nodes:
        rows = [
            release_row(ctx.leaves_at(idx.running[int(idx.job[row])]), idx.placement(row))
            for row in idx.rows_on(node).tolist()
        ]
        rows += placed_on.get(node, [])
        rows.sort()
        if rows:
            ctx.release[node] = rows
        else:
            ctx.release.pop(node, None)


def commit(
    ctx: CycleContext,
    job: Job,
    chosen: dict[str, Unit],
    nodes: tuple[int, ...],
    why: Callable[[Running], str],
) -> None:
    """Evict (or shrink) ``chosen`` for ``job`` and hold ``nodes`` for it as a preemption
    reservation (consolidation commits its moves the same way); ``why`` names the rule that let
    each victim go."""
    cfg = ctx.config
    grace = 0.0
    shrinks: dict[str, list[int]] = {}
    for u in chosen.values():
        r = u.running
        if u.shrink:
            shrinks.setdefault(r.job.id, []).append(u.task)
            ctx.add_leaving(r.job, 1)
            continue
        g = cfg.grace_s if r.job.checkpointable else 0.0
        grace = max(grace, g)
        ctx.intents.append(Preempt(r.job.id, job.id, g, why(r), u.lost_gpu_s))
        ctx.evicting.add(r.job.id)
        ctx.add_leaving(r.job, r.replicas)
    for job_id, tasks in shrinks.items():
        r = ctx.running_by_id[job_id]
        keep = r.replicas - len(tasks)
        ctx.intents.append(Resize(job_id, keep, (), tuple(sorted(tasks)), by=job.id))
        ctx.evicting.add(job_id)  # one change per job per cycle
        grace = max(grace, cfg.grace_s)
    ctx.count_held(job)
    if ctx.release is not None:
        # The victims now leave within their grace: only their nodes' release rows change (a
        # whole rebuild over every running task cost more than the rest of the search).
        idx = victim_index(ctx)
        leaving = {idx.by_id[u.running.job.id] for u in chosen.values()}
        touched = {int(idx.node[row]) for k in leaving for row in idx.rows_of_job(k)}
        release_nodes(ctx, touched, idx)
    timeout = ctx.now + grace + cfg.reserve_timeout_s
    ctx.hold(Reservation(job.id, nodes, ctx.now, ctx.now + grace, timeout, preemption=True))
