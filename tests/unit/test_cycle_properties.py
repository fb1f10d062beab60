"""Properties of the scheduling cycle on random clusters, queues and jobs (hypothesis)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig, CycleResult, Place, Preempt, Reserve, Snapshot, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.jobs import Job, Reservation, Running
from shared.core.plugins.order.priority_age import RequeueAt
from shared.core.plugins.order.within import order_within
from shared.core.queues import QueueSpec, QueueTree, vector
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from tests.unit.builders import node

QUEUES = ("a", "b", "c")
NESTED = ("a", "b")  # under a parent "p" in half the worlds
PRIORITIES = (-100, 0, 100)
NOW = 100_000.0
REQUEUE: tuple[RequeueAt, ...] = ("eviction", "creation")


@dataclass
class World:
    snapshot: Snapshot
    config: CycleConfig


@st.composite
def worlds(draw: st.DrawFn) -> World:
    sizes = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=5))
    cluster = ClusterState([node(f"n{i}", cpu=64_000, mem=256_000, gpus=g) for i, g in enumerate(sizes)])
    total = sum(sizes) * 1000
    guarantees = draw(st.lists(st.integers(0, total // 3000), min_size=3, max_size=3))
    maxes = draw(st.lists(st.one_of(st.none(), st.integers(1, total // 1000)), min_size=3, max_size=3))
    # Half the worlds nest "a" and "b" under a parent "p" with a max (and guarantee) of its own.
    nested = draw(st.booleans())
    parent_max = draw(st.one_of(st.none(), st.integers(1, total // 1000)))
    specs = [
        QueueSpec(
            q,
            parent="p" if nested and q in NESTED else "root",
            weight=1.0 + i,
            guarantee=vector(gpu=1000.0 * g),
            max=vector(gpu=float("inf") if m is None else max(1000.0 * m, 1000.0 * g), cpu=1e18, memory=1e18),
        )
        for i, (q, g, m) in enumerate(zip(QUEUES, guarantees, maxes, strict=True))
    ]
    if nested:
        inner = 1000.0 * sum(g for q, g in zip(QUEUES, guarantees, strict=True) if q in NESTED)
        cap = float("inf") if parent_max is None else max(1000.0 * parent_max, inner)
        specs.append(QueueSpec("p", guarantee=vector(gpu=inner), max=vector(gpu=cap, cpu=1e18, memory=1e18)))
    tree = QueueTree(specs)
    running: list[Running] = []
    for k in range(draw(st.integers(0, 12))):
        gpus = draw(st.sampled_from([1, 2]))
        shape = TaskShape(2000, 1024, gpus, 1000)
        job = Job(
            id=f"r{k}",
            queue=draw(st.sampled_from(QUEUES)),
            tenant="t",
            shape=shape,
            priority=draw(st.sampled_from(PRIORITIES)),
            checkpointable=draw(st.booleans()),
            duration_s=draw(st.sampled_from([None, 600.0, 50_000.0])),
            preemptions=draw(st.integers(0, 4)),
        )
        free = [n for n in range(cluster.size) if (cluster.gpu_free[n] == 1000).sum() >= gpus]
        if not free:
            break
        n = free[draw(st.integers(0, len(free) - 1))]  # scattered, so that large jobs find no whole node
        slots = tuple(int(g) for g in np.flatnonzero(cluster.gpu_free[n] == 1000)[:gpus])
        placement = cluster.place(n, shape, slots)
        started = draw(st.sampled_from([NOW - 60.0, NOW - 5_000.0]))
        running.append(Running(job, (placement,), started))
    pending = []
    for k in range(draw(st.integers(1, 10))):
        replicas = draw(st.integers(1, 3))
        pending.append(
            Job(
                id=f"p{k}",
                queue=draw(st.sampled_from(QUEUES)),
                tenant="t",
                shape=TaskShape(2000, 1024, draw(st.sampled_from([1, 2, 4, 8])), 1000),
                replicas=replicas,
                min_replicas=draw(st.sampled_from([0, 1])) if replicas > 1 else 0,
                priority=draw(st.sampled_from(PRIORITIES)),
                submitted=float(k),
                duration_s=draw(st.sampled_from([None, 100.0, 100_000.0])),
            )
        )
    profile = build_profile("tessera", TypicalWorkload.from_tasks([j.shape for j in pending], coverage=1.0))
    # Both orders a placement worker offers (TESSERA_ORDER_WITHIN), with either requeue timestamp.
    order = order_within(draw(st.sampled_from(["age", "response-ratio"])), draw(st.sampled_from(REQUEUE)))
    config = CycleConfig(profile, order=order, reserve_min_gpus=draw(st.sampled_from([0.0, 8.0])))
    return World(Snapshot(cluster, pending, running, queues=tree), config)


def cycle(w: World, seed: int = 0) -> CycleResult:
    return run_cycle(w.snapshot, w.config, NOW, np.random.default_rng(seed))


# Derandomized so CI runs the same 100 worlds every time.  To explore further, set
# derandomize=False and raise max_examples (seeds 1-30 passed on 2026-12-03; 5,000 random worlds
# per property on 2026-12-07, and 2,000 more once half the worlds nested two queues under a
# parent).  The three counterexamples found so far were flaws of the properties, fixed above;
# the last was a guaranteed job whose only room was reserved for a higher-priority job of its
# own queue.
PROPS = settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@PROPS
@given(worlds())
def test_no_queue_is_taken_past_its_max(w: World) -> None:
    result = cycle(w)
    tree = w.snapshot.queues
    assert tree is not None
    jobs = {j.id: j for j in w.snapshot.pending}
    held: dict[str, float] = {q: 0.0 for q in QUEUES}
    for r in w.snapshot.running:
        held[r.job.queue] += r.job.shape.total_gpu_milli * r.replicas
    before = dict(held)
    for intent in result.of(Place):
        j = jobs[intent.job]
        held[j.queue] += j.shape.total_gpu_milli * len(intent.placements)
    for q in QUEUES:
        assert held[q] <= max(float(tree.specs[q].max[0]), before[q]) + 1e-6  # placements never cross max
    if "p" in tree.specs:  # nor a parent's, over its subtree
        after, was = sum(held[q] for q in NESTED), sum(before[q] for q in NESTED)
        assert after <= max(float(tree.specs["p"].max[0]), was) + 1e-6


@PROPS
@given(worlds())
def test_gangs_start_with_at_least_their_minimum_or_not_at_all(w: World) -> None:
    jobs = {j.id: j for j in w.snapshot.pending}
    for intent in cycle(w).of(Place):
        j = jobs[intent.job]
        assert j.fewest <= len(intent.placements) <= j.replicas


@PROPS
@given(worlds())
def test_a_preemption_never_evicts_higher_priority_and_equal_only_to_reclaim(w: World) -> None:
    """Equal priority is evicted only to reclaim a guarantee, or moved (consolidation: a
    checkpointable job at most ``consolidate_share`` of the job it makes room for)."""
    result = cycle(w)
    running = {r.job.id: r for r in w.snapshot.running}
    pending = {j.id: j for j in w.snapshot.pending}
    for p in result.of(Preempt):
        victim, by = running[p.victim].job, pending[p.by]
        assert victim.priority <= by.priority
        if p.reason == "consolidation":
            assert victim.checkpointable
            assert victim.gpus <= w.config.consolidate_share * by.gpus
        elif victim.priority == by.priority:
            assert "reclaim" in p.reason
        assert victim.preemptions < w.config.max_preemptions
        assert running[p.victim].started <= NOW - w.config.min_runtime_s


@PROPS
@given(worlds())
def test_reserved_room_goes_only_to_jobs_that_end_before_it_starts(w: World) -> None:
    result = cycle(w)
    pending = {j.id: j for j in w.snapshot.pending}
    final = result.reservations
    est = w.snapshot.estimator
    held: dict[int, str] = {}  # node -> job holding it, as the intents go (a job placed before a
    for intent in result.intents:  # reservation was made is one the reservation waits for)
        if isinstance(intent, Reserve) and not intent.reservation.preemption:
            held.update(dict.fromkeys(intent.reservation.nodes, intent.reservation.job))
        elif isinstance(intent, Place):
            for p in intent.placements:
                owner = held.get(p.node)
                if owner is not None and owner != intent.job and owner in final:
                    assert NOW + est.estimate(pending[intent.job]) <= final[owner].expected_start


@PROPS
@given(worlds())
def test_guarantees_are_honoured_whenever_demanded(w: World) -> None:
    """A queue within its guarantee never waits behind borrowed work: its blocked job is either
    placed or evicts (reclaims) someone, or nothing evictable could make room for it."""
    result = cycle(w)
    blocked = [j for j in w.snapshot.pending if j.id in result.unschedulable]
    preemptors = {p.by for p in result.of(Preempt)}
    tree = w.snapshot.queues
    assert tree is not None
    # What the cycle itself placed counts: room it gave to others is not free, and jobs of the
    # same queue it placed count against the queue's guarantee.
    after = w.snapshot.cluster.copy()
    for placements in result.placed.values():
        for p in placements:
            after.place(p.node, p.task, p.gpus)
    queue_of = {job.id: job.queue for job in w.snapshot.pending}
    for j in blocked[:1]:  # the first blocked job: later ones may be beyond the cycle's limits
        g = float(tree.specs[j.queue].guarantee[0])
        used = sum(
            r.job.shape.total_gpu_milli * r.replicas for r in w.snapshot.running if r.job.queue == j.queue
        ) + sum(
            p.task.total_gpu_milli
            for job_id, placements in result.placed.items()
            if queue_of.get(job_id) == j.queue
            for p in placements
        )
        need = j.shape.total_gpu_milli * j.fewest
        if g == 0 or used + need > g or result.unschedulable[j.id].plugin == "QueueMax":
            continue  # a max (its own or a parent's, below the guarantee) binds before any guarantee
        borrowed = [
            r
            for r in w.snapshot.running
            if r.job.queue != j.queue
            and r.job.priority <= j.priority
            and r.started <= NOW - w.config.min_runtime_s
            and r.job.preemptions < w.config.max_preemptions
        ]
        # Room that borrowed work could free, beside what is free: if it would hold the job, the
        # job must have been placed or preempted for (a node is checked whole, as the cycle does).
        # Nodes another job holds a reservation on are not counted: a guarantee does not break a
        # reservation (EASY's slot, or a preemptor's freed room; taking a borrower's held nodes for
        # a guarantee was measured and not kept, docs/results/timeline/history.md, ninth stop).
        held = {n for r in result.reservations.values() if r.job != j.id for n in r.nodes}
        c = after
        could = False
        for n in range(c.size):
            if n in held:
                continue
            freeable = sum(
                p.task.num_gpu for r in borrowed if _borrowing(w, r) for p in r.placements if p.node == n
            )
            if (c.gpu_free[n] == 1000).sum() + freeable >= j.shape.num_gpu * j.fewest:
                could = True
        if could and j.fewest == 1 and j.shape.num_gpu <= 2:
            assert j.id in result.placed or j.id in preemptors or j.id in result.reservations


def _borrowing(w: World, r: Running) -> bool:
    tree = w.snapshot.queues
    assert tree is not None
    q = r.job.queue
    used = sum(x.job.shape.total_gpu_milli * x.replicas for x in w.snapshot.running if x.job.queue == q)
    return used - r.job.shape.total_gpu_milli * r.replicas >= float(tree.specs[q].guarantee[0])


@PROPS
@given(worlds(), st.integers(0, 2**16))
def test_the_same_snapshot_and_seed_give_the_same_intents(w: World, seed: int) -> None:
    a, b = cycle(w, seed), cycle(w, seed)
    assert a.intents == b.intents and a.unschedulable == b.unschedulable and a.reservations == b.reservations


@st.composite
def barred_worlds(draw: st.DrawFn) -> tuple[World, frozenset[str]]:
    """A world whose tree, applied after some pending jobs were admitted, bars them: their queue
    is gone from it, or their tenant is not allowed there.  Some may hold a reservation."""
    w = draw(worlds())
    pending = w.snapshot.pending
    picked = draw(st.sets(st.sampled_from([j.id for j in pending]), max_size=len(pending)))
    moved = []
    for j in pending:
        if j.id in picked:
            j = replace(j, queue="gone") if draw(st.booleans()) else replace(j, tenant="revoked")
        moved.append(j)
    tree = w.snapshot.queues
    assert tree is not None
    specs = [replace(spec, tenants=("t",)) for spec in tree.specs.values()]  # "revoked" is allowed nowhere
    held = {
        j.id: Reservation(j.id, (0,), since=NOW - 100.0, expected_start=NOW + 100.0, timeout_at=NOW + 5_000.0)
        for j in moved[:1]
        if j.id in picked and draw(st.booleans())
    }
    snapshot = replace(w.snapshot, pending=moved, queues=QueueTree(specs), reservations=held)
    return World(snapshot, w.config), frozenset(picked)


@PROPS
@given(barred_worlds())
def test_a_job_the_tree_bars_is_never_placed_reserved_or_preempted_for(
    case: tuple[World, frozenset[str]],
) -> None:
    w, barred = case
    result = cycle(w)
    assert not barred & set(result.placed)
    assert not barred & set(result.reservations)
    assert not barred & {p.by for p in result.of(Preempt)}
    for job_id in barred:
        assert result.unschedulable[job_id].plugin in ("QueueGone", "TenantBarred")


@st.composite
def scattered(draw: st.DrawFn) -> World:
    """Nodes holding a few long 1-2 GPU jobs each, spread out, and one large gang waiting."""
    sizes = draw(st.lists(st.sampled_from([4, 8]), min_size=3, max_size=8))
    cluster = ClusterState([node(f"n{i}", cpu=64_000, mem=256_000, gpus=g) for i, g in enumerate(sizes)])
    running: list[Running] = []
    for k in range(draw(st.integers(1, 12))):
        gpus = draw(st.sampled_from([1, 2]))
        shape = TaskShape(2000, 1024, gpus, 1000)
        free = [n for n in range(cluster.size) if (cluster.gpu_free[n] == 1000).sum() >= gpus]
        if not free:
            break
        n = free[draw(st.integers(0, len(free) - 1))]
        slots = tuple(int(g) for g in np.flatnonzero(cluster.gpu_free[n] == 1000)[:gpus])
        job = Job(
            id=f"r{k}",
            queue="a",
            tenant="t",
            shape=shape,
            priority=draw(st.sampled_from([0, 100])),  # none the gang may preempt
            checkpointable=draw(st.booleans()),
            duration_s=1e9,
            preemptions=draw(st.integers(0, 3)),
        )
        running.append(Running(job, (cluster.place(n, shape, slots),), NOW - 5_000.0))
    gpus = draw(st.sampled_from([4, 8]))
    gang = Job(
        id="gang",
        queue="a",
        tenant="t",
        shape=TaskShape(2000, 1024, gpus, 1000),
        replicas=draw(st.integers(1, 2)),
        priority=0,
    )
    profile = build_profile("tessera", TypicalWorkload.from_tasks([gang.shape], coverage=1.0))
    return World(Snapshot(cluster, [gang], running, queues=QueueTree([QueueSpec("a")])), CycleConfig(profile))


@PROPS
@given(scattered())
def test_a_consolidation_holds_room_for_the_job_and_for_every_job_it_moves(w: World) -> None:
    """Once the moved jobs are gone, the job fits on the nodes it holds and every moved job
    fits, at the same time, on the room left elsewhere."""
    result = cycle(w)
    moves = [p for p in result.of(Preempt) if p.reason == "consolidation"]
    if not moves:
        return
    moved = {p.victim for p in moves}
    running = {r.job.id: r for r in w.snapshot.running}
    assert all(running[v].job.checkpointable and running[v].job.priority <= 0 for v in moved)
    after = w.snapshot.cluster.copy()
    for v in moved:
        for p in running[v].placements:
            after.remove(p)
    gang = w.snapshot.pending[0]
    held = result.reservations[gang.id]
    assert held.preemption
    free = {n: int((after.gpu_free[n] == 1000).sum()) for n in range(after.size)}
    for _ in range(gang.fewest):
        n = next(n for n in held.nodes if free[n] >= gang.shape.num_gpu)
        free[n] -= gang.shape.num_gpu
    for v in sorted(moved, key=lambda v: -running[v].job.shape.num_gpu):
        need = running[v].job.shape.num_gpu
        n = next(n for n in range(after.size) if n not in held.nodes and free[n] >= need)
        free[n] -= need


@dataclass
class Reclaim:
    """A cluster filled by ``red``'s one-GPU jobs; ``blue`` jobs then arrive a few per cycle."""

    gpus: list[int]  # per node
    blue_guarantee: int
    blue_jobs: int
    per_cycle: int
    leave_after: list[int]  # cycles each victim takes to stop, drawn in turn


@st.composite
def reclaims(draw: st.DrawFn) -> Reclaim:
    gpus = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=5))
    total = sum(gpus)
    return Reclaim(
        gpus,
        draw(st.integers(1, total - 1)),
        draw(st.integers(1, total)),
        draw(st.integers(1, 4)),
        draw(st.lists(st.integers(0, 3), min_size=1, max_size=8)),
    )


@PROPS
@given(reclaims())
def test_reclaim_across_cycles_evicts_what_was_borrowed_and_no_more(w: Reclaim) -> None:
    """A shell's loop: victims take cycles to stop (their queue's usage must not count them as
    still borrowed meanwhile) and preemptors wait for the room (their queue's must count it).
    The borrower loses at most what it borrowed, and the owner ends with its guarantee.
    Preemptors share nodes (several may wait on one), and what they hold on a node is always
    there for them: free, or freed by a victim on its way out."""
    cluster = ClusterState([node(f"n{i}", cpu=64_000, mem=256_000, gpus=g) for i, g in enumerate(w.gpus)])
    total = sum(w.gpus)
    red_guarantee = total - w.blue_guarantee
    tree = QueueTree(
        [
            QueueSpec("red", guarantee=vector(gpu=1000.0 * red_guarantee)),
            QueueSpec("blue", guarantee=vector(gpu=1000.0 * w.blue_guarantee)),
        ]
    )
    one = TaskShape(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
    config = CycleConfig(
        build_profile("bestfit", TypicalWorkload.from_tasks([one], coverage=1.0)), min_runtime_s=0.0
    )
    runs: dict[str, Running] = {}
    for n, g in enumerate(w.gpus):
        for slot in range(g):
            red = Job(f"red-{n}-{slot}", "red", "t", one, checkpointable=True, submitted=0.0)
            runs[red.id] = Running(red, (cluster.place(n, one, (slot,)),), 0.0)
    blue = [
        Job(f"blue-{k}", "blue", "t", one, checkpointable=True, submitted=1.0 + k) for k in range(w.blue_jobs)
    ]
    pending: dict[str, Job] = {}
    reservations: dict[str, Reservation] = {}
    leaving: dict[str, int] = {}  # victim -> cycles left until it has stopped
    evicted = {"red": 0, "blue": 0}
    now = NOW
    for step in range(40):
        for job in blue[step * w.per_cycle : (step + 1) * w.per_cycle]:
            pending[job.id] = replace(job, submitted=now)
        for victim, left in list(leaving.items()):
            if left > 0:
                leaving[victim] = left - 1
                continue
            del leaving[victim]
            gone = runs.pop(victim)
            for freed in gone.placements:
                cluster.remove(freed)
            pending[victim] = replace(gone.job, preemptions=gone.job.preemptions + 1, queued_since=now)
        snapshot = Snapshot(
            cluster, list(pending.values()), list(runs.values()), queues=tree, reservations=reservations
        )
        result = run_cycle(snapshot, config, now, np.random.default_rng(step))
        for ask in result.of(Preempt):
            run = runs[ask.victim]
            runs[ask.victim] = replace(run, preempting=True, leaving=run.replicas)
            leaving[ask.victim] = w.leave_after[sum(evicted.values()) % len(w.leave_after)]
            evicted[run.job.queue] += 1
        for job_id, placements in result.placed.items():
            for p in placements:
                cluster.place(p.node, p.task, p.gpus)
            runs[job_id] = Running(pending.pop(job_id), tuple(placements), now)
        reservations = dict(result.reservations)
        promised = Counter(n for r in reservations.values() if r.preemption for n in r.nodes)
        for n, holders in promised.items():  # 1-GPU preemptors: one GPU each on their one node
            out = sum(1 for r in runs.values() if r.leaving for p in r.placements if p.node == n)
            assert holders <= int((cluster.gpu_free[n] == 1000).sum()) + out, (n, holders, out)
        now += 5.0
    assert evicted["red"] <= total - red_guarantee, evicted  # red borrowed the blue guarantee
    assert evicted["blue"] == 0, evicted  # and never took anything back
    held = sum(1 for r in runs.values() if r.job.queue == "blue")
    assert held == min(w.blue_jobs, w.blue_guarantee)
