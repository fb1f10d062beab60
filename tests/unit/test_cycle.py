"""The scheduling cycle, stage by stage, on clusters small enough to reason about."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shared.core.cluster import BoolArray, ClusterState, Placement
from shared.core.cycle import (
    CycleConfig,
    CycleResult,
    Place,
    Preempt,
    Release,
    Reserve,
    Resize,
    Snapshot,
    run_cycle,
)
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Profile
from shared.core.jobs import Job, Reservation, Running, RuntimeEstimator
from shared.core.plugins.order.fifo import Fifo
from shared.core.plugins.order.las import LeastAttained
from shared.core.queues import QueueSpec, QueueTree, vector
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from tests.unit.builders import cluster, node, task

GPU1 = task(gpus=1)


def profile(*shapes: TaskShape) -> Profile:
    return build_profile("bestfit", TypicalWorkload.from_tasks(shapes or [GPU1], coverage=1.0))


def job(job_id: str, gpus: int = 1, replicas: int = 1, **kw: object) -> Job:
    fields: dict[str, object] = {"queue": "q", "tenant": "t", "shape": task(gpus=gpus), "replicas": replicas}
    fields.update(kw)
    return Job(id=job_id, **fields)  # type: ignore[arg-type]


def running(
    c: ClusterState, j: Job, node_gpus: list[tuple[int, tuple[int, ...]]], started: float = 0.0
) -> Running:
    """Take ``j``'s tasks on ``c`` (node, gpu slots per task) and describe it as running."""
    placements = tuple(c.place(n, j.shape, g) for n, g in node_gpus)
    return Running(j, placements, started)


def cycle(snapshot: Snapshot, config: CycleConfig | None = None, now: float = 1000.0) -> CycleResult:
    return run_cycle(snapshot, config or CycleConfig(profile()), now, np.random.default_rng(0))


def test_a_gang_that_does_not_fit_whole_takes_nothing() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    jobs = [job("big", gpus=2, replicas=3), job("small", replicas=2, submitted=1.0)]
    result = cycle(Snapshot(c, jobs), CycleConfig(profile(), order=Fifo(), reserve=False))
    assert "big" in result.unschedulable and "big" not in result.placed
    assert len(result.placed["small"]) == 2
    assert c.used_gpu_milli() == 0  # the caller's state is never changed


def test_every_replica_of_a_fitting_job_is_placed_without_overlap() -> None:
    c = cluster(node("a", gpus=4), node("b", gpus=4))
    result = cycle(Snapshot(c, [job("j", gpus=2, replicas=4)]))
    slots = [(p.node, g) for p in result.placed["j"] for g in p.gpus]
    assert len(slots) == 8 and len(set(slots)) == 8
    assert result.touched == {0, 1}
    assert [type(i) for i in result.intents] == [Place]


def test_preferred_nodes_are_tried_first_and_any_node_after() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    preferred: BoolArray = np.array([False, True])
    result = cycle(Snapshot(c, [job("j", replicas=3)], preferred=preferred))
    assert [p.node for p in result.placed["j"]] == [1, 1, 0]


def test_a_shape_that_failed_is_not_searched_again_in_the_same_cycle() -> None:
    c = cluster(node("a", gpus=2))
    base = profile()
    searched: list[int] = []

    class CountingFilter:
        name = "Counting"

        def filter(self, cluster: ClusterState, t: TaskShape) -> BoolArray:
            searched.append(t.num_gpu)
            return np.ones(cluster.size, dtype=np.bool_)

        def could_ever_fit(self, cluster: ClusterState, t: TaskShape) -> BoolArray:
            return np.ones(cluster.size, dtype=np.bool_)

    counting = Profile(base.name, [CountingFilter(), *base.filters], base.scorer)
    jobs = [job(f"big{i}", gpus=4, submitted=float(i)) for i in range(50)]
    jobs += [job("gang", replicas=3, submitted=60.0), job("gang2", replicas=4, submitted=61.0)]
    jobs += [job("one", submitted=62.0)]
    config = CycleConfig(counting, order=Fifo(), reserve=False, preempt=False, reclaim=False)
    result = cycle(Snapshot(c, jobs), config)
    assert set(result.unschedulable) == {f"big{i}" for i in range(50)} | {"gang", "gang2"}
    assert result.unschedulable["big49"] == result.unschedulable["big0"]  # the same reason
    assert [p.node for p in result.placed["one"]] == [0]  # fewer replicas of that shape still tried
    # One search for the 4-GPU shape, three for the gang (two fit, the third fails), none for the
    # larger gang of the same shape, one for "one".
    assert searched == [4, 1, 1, 1, 1]


def test_queue_depth_counts_searches_not_jobs_a_failed_shape_decided() -> None:
    # One free GPU.  Queue "a" is first in DRF order (both hold nothing; ties go by name) and
    # its three 2-GPU jobs cannot fit; "b"'s 1-GPU job can.  Counted, a's jobs spent a depth of
    # 2 and "b" was never looked at; its second and third job cost no search.
    c = cluster(node("n", gpus=4))
    held = running(c, job("other", gpus=3, queue="c"), [(0, (0, 1, 2))])
    jobs = [job(f"a{i}", gpus=2, queue="a", submitted=float(i)) for i in range(3)]
    jobs.append(job("b0", queue="b", submitted=10.0))
    config = CycleConfig(profile(), order=Fifo(), reserve=False, preempt=False, reclaim=False, queue_depth=2)
    result = cycle(Snapshot(c, jobs, running=[held]), config)
    assert [p.node for p in result.placed["b0"]] == [0]
    assert {result.unschedulable[f"a{i}"].plugin for i in range(3)} == {"GpuFit"}
    # The bound still holds for jobs that need a search: with a depth of 1, "b0" waits for it.
    result = cycle(Snapshot(c, jobs, running=[held]), replace(config, queue_depth=1))
    assert "b0" not in result.placed
    assert result.unschedulable["b0"].plugin == "QueueDepth"


def test_strict_fifo_starts_nothing_behind_a_job_that_does_not_fit() -> None:
    c = cluster(node("a", gpus=4))
    jobs = [job("head", gpus=8, submitted=0.0), job("small", submitted=1.0)]
    config = CycleConfig(profile(), order=Fifo(), fair_share=False, strict=True, reserve=False)
    result = cycle(Snapshot(c, jobs), config)
    assert not result.placed
    assert result.unschedulable["small"].plugin == "StrictOrder"


def test_queues_take_turns_by_dominant_share_of_what_they_deserve() -> None:
    c = cluster(node("a", gpus=4), node("b", gpus=4))
    tree = QueueTree([QueueSpec("red", weight=1.0), QueueSpec("blue", weight=3.0)])
    jobs = [job(f"r{i}", queue="red", submitted=float(i)) for i in range(8)]
    jobs += [job(f"b{i}", queue="blue", submitted=100.0 + i) for i in range(8)]
    result = cycle(Snapshot(c, jobs, queues=tree), CycleConfig(profile(), order=Fifo()))
    placed = set(result.placed)
    # 8 GPUs split 1:3 although every red job was submitted first.
    assert sum(j.startswith("r") for j in placed) == 2 and sum(j.startswith("b") for j in placed) == 6


def test_a_queue_at_its_max_waits_even_with_room_left() -> None:
    c = cluster(node("a", gpus=8))
    tree = QueueTree([QueueSpec("capped", max=vector(gpu=2000, cpu=1e12, memory=1e12))])
    jobs = [job(f"j{i}", queue="capped", submitted=float(i)) for i in range(4)]
    result = cycle(Snapshot(c, jobs, queues=tree))
    assert set(result.placed) == {"j0", "j1"}
    assert result.unschedulable["j2"].plugin == "QueueMax"


def test_a_job_above_its_queues_max_even_alone_says_it_waits_for_the_tree_not_for_room() -> None:
    # Admitted under an earlier tree; the one applied since caps the parent below the job.
    c = cluster(node("a", gpus=8))
    low = vector(gpu=2000, cpu=1e12, memory=1e12)
    tree = QueueTree([QueueSpec("org", max=low), QueueSpec("team", parent="org")])
    jobs = [job("big", gpus=4, queue="team"), job("small", queue="team", submitted=1.0)]
    jobs += [job("more", queue="team", submitted=2.0), job("most", queue="team", submitted=3.0)]
    result = cycle(Snapshot(c, jobs, queues=tree))
    assert set(result.placed) == {"small", "more"}
    big = result.unschedulable["big"]
    assert (
        big.plugin == "QueueMax"
        and "needs more than queue 'org''s max even with nothing else running" in big.reason
    )
    # One that only waits for the queue's other jobs to end keeps the plain reason.
    assert result.unschedulable["most"].reason == "its queue (or a parent) would exceed its max quota"


def test_a_job_whose_queue_the_tree_dropped_waits_and_says_why_until_the_queue_is_back() -> None:
    c = cluster(node("a", gpus=8))
    kept = QueueSpec("kept", max=vector(gpu=1000, cpu=1e12, memory=1e12))
    jobs = [job("g", queue="gone", gpus=4), job("g-gang", queue="gone", gpus=8, submitted=1.0)]
    jobs += [job("k0", queue="kept", submitted=2.0), job("k1", queue="kept", submitted=3.0)]
    for fair_share in (True, False):
        config = CycleConfig(profile(task(gpus=4), task(gpus=8), GPU1), fair_share=fair_share)
        result = cycle(Snapshot(c, jobs, queues=QueueTree([kept])), config)
        # Placed without a queue, "g" would escape every quota; nor may it reserve or evict.
        assert set(result.placed) == {"k0"}, fair_share
        assert result.unschedulable["k1"].plugin == "QueueMax"
        for gone in ("g", "g-gang"):
            status = result.unschedulable[gone]
            assert status.plugin == "QueueGone" and "'gone' is not in the queue tree" in status.reason
        assert not result.reservations and not result.of(Preempt)
    back = QueueTree([kept, QueueSpec("gone")])
    assert set(cycle(Snapshot(c, jobs, queues=back)).placed) == {"g", "k0"}
    # A reservation it made before its queue went is given up: its holder would be placed first.
    held = {"g": Reservation("g", (0,), since=0.0, expected_start=500.0, timeout_at=5000.0)}
    result = cycle(Snapshot(c, jobs, queues=QueueTree([kept]), reservations=held))
    assert "g" not in result.placed and "g" not in result.reservations
    assert [(r.job, "'gone' is not in the queue tree" in r.reason) for r in result.of(Release)] == [
        ("g", True)
    ]


def test_a_job_whose_tenant_a_new_tree_no_longer_allows_waits_and_says_why() -> None:
    c = cluster(node("a", gpus=8))
    jobs = [job("ads-1", queue="team", tenant="ads"), job("ml-1", queue="team", tenant="ml", submitted=1.0)]
    for fair_share in (True, False):
        config = CycleConfig(profile(), fair_share=fair_share)
        # The parent no longer lets "ads" in (a parent's list bounds its subtree, as at admission).
        tree = QueueTree([QueueSpec("org", tenants=("ml",)), QueueSpec("team", parent="org")])
        result = cycle(Snapshot(c, jobs, queues=tree), config)
        assert set(result.placed) == {"ml-1"}, fair_share
        barred = result.unschedulable["ads-1"]
        assert barred.plugin == "TenantBarred"
        assert barred.reason.startswith("tenant 'ads' is no longer allowed on queue 'org'")
    assert set(cycle(Snapshot(c, jobs, queues=QueueTree([QueueSpec("team")]))).placed) == {"ads-1", "ml-1"}


def test_deserved_shares_fill_guarantees_first_then_split_the_rest_by_weight() -> None:
    tree = QueueTree(
        [
            QueueSpec("a", weight=1.0, guarantee=vector(gpu=6000)),
            QueueSpec("b", weight=1.0),
            QueueSpec("c", weight=2.0),
        ]
    )
    demand = {"a": vector(gpu=10_000), "b": vector(gpu=10_000), "c": vector(gpu=1_000)}
    got = tree.deserved(vector(gpu=16_000), demand)
    # a: its 6 guaranteed GPUs; c wants only 1; the remaining 9 split 1:1 between a and b.
    assert got["c"][0] == 1_000
    assert abs(got["a"][0] - 10_000) < 1e-6 and abs(got["b"][0] - 5_000) < 1e-6


def test_a_large_blocked_job_reserves_and_a_short_job_backfills_before_it_starts() -> None:
    c = cluster(node("a", gpus=8), node("b", gpus=8))
    est = RuntimeEstimator()
    long_run = job("long", gpus=4, duration_s=10_000.0)
    hold = [
        running(c, long_run, [(0, (0, 1, 2, 3))]),
        running(c, replace(long_run, id="l2"), [(1, (0, 1, 2, 3))]),
    ]
    hold.append(running(c, replace(long_run, id="l3", duration_s=20_000.0), [(1, (4, 5, 6, 7))]))
    big = job("big", gpus=8, submitted=1.0)
    short = job("short", gpus=4, submitted=2.0, duration_s=100.0)
    late = job("late", gpus=4, submitted=3.0, duration_s=50_000.0)
    config = CycleConfig(profile(), order=Fifo(), fair_share=False, preempt=False, reclaim=False)
    result = cycle(Snapshot(c, [big, short, late], hold, estimator=est), config, now=1000.0)
    reserve = next(i for i in result.intents if isinstance(i, Reserve))
    assert reserve.reservation.job == "big" and reserve.reservation.expected_start == 10_000.0
    # Node b is full; the short job ends (1,100 s) before the reservation on a starts, so it
    # backfills there; the long one would delay it and stays pending, although there is room.
    assert "short" in result.placed and "late" not in result.placed
    assert result.placed["short"][0].node in reserve.reservation.nodes


def test_a_worker_leaves_easys_slot_to_another_workers_blocked_head() -> None:
    """Live, each placement worker acts on its own jobs.  The head of the order is a gang owned
    by another worker and does not fit: the slot is its (its worker reserves it), so this worker
    does not reserve for its own later blocked job; it does once the head is placeable or backs off."""
    c = cluster(node("a", gpus=8), node("b", gpus=8))
    hold = [
        running(c, job("r1", gpus=4, duration_s=5_000.0), [(0, (0, 1, 2, 3))]),
        running(c, job("r2", gpus=4, duration_s=9_000.0), [(1, (0, 1, 2, 3))]),
    ]
    gang = job("gang", gpus=8, replicas=2, submitted=1.0)
    mine = job("mine", gpus=6, submitted=2.0)
    config = CycleConfig(profile(), order=Fifo(), preempt=False, reclaim=False)
    alone = cycle(Snapshot(c, [gang, mine], hold), config)
    assert set(alone.reservations) == {"gang"}  # one cycle over all jobs: the head reserves
    worker = cycle(Snapshot(c, [gang, mine], hold, actionable=frozenset({"mine"})), config)
    assert not worker.reservations and "mine" in worker.unschedulable
    owner = cycle(Snapshot(c, [gang, mine], hold, actionable=frozenset({"gang"})), config)
    assert set(owner.reservations) == {"gang"}
    # The head backing off (it may not reserve): the slot passes to the next blocked job.
    backing = cycle(
        Snapshot(c, [gang, mine], hold, backoff={"gang": 5_000.0}, actionable=frozenset({"mine"})), config
    )
    assert set(backing.reservations) == {"mine"}
    # A head with room (another worker will place it) takes no slot.
    small_head = job("gang", gpus=2, submitted=1.0)
    free = cycle(Snapshot(c, [small_head, mine], hold, actionable=frozenset({"mine"})), config)
    assert set(free.reservations) == {"mine"}
    # Where only large jobs reserve, another worker's small blocked head takes no slot either.
    large_only = replace(config, reserve_min_gpus=8.0, reserve_after_s=1e9)
    big = job("big", gpus=8, submitted=2.0)
    head = replace(mine, submitted=1.0)  # first in the order, 6 GPUs, another worker's
    sized = cycle(Snapshot(c, [head, big], hold, actionable=frozenset({"big"})), large_only)
    assert set(sized.reservations) == {"big"}


def test_a_reservation_past_its_timeout_is_released_and_the_job_backs_off() -> None:
    c = cluster(node("a", gpus=8))
    hold = [running(c, job("x", gpus=8, duration_s=1e9), [(0, tuple(range(8)))])]
    big = job("big", gpus=8)
    held = Reservation("big", (0,), since=0.0, expected_start=100.0, timeout_at=500.0)
    result = cycle(Snapshot(c, [big], hold, reservations={"big": held}), now=600.0)
    release = next(i for i in result.intents if isinstance(i, Release))
    assert release.job == "big" and release.backoff_until > 600.0
    assert "big" not in result.reservations and "big" in result.backoff


def test_two_blocked_gangs_never_hold_the_same_node() -> None:
    c = cluster(*(node(n, gpus=8) for n in "abcd"))
    hold = [
        running(c, job(f"r{i}", gpus=4, duration_s=1000.0 * (i + 1)), [(i, (0, 1, 2, 3))]) for i in range(4)
    ]
    gangs = [job("g1", gpus=8, replicas=2, submitted=1.0), job("g2", gpus=8, replicas=2, submitted=2.0)]
    config = CycleConfig(profile(), order=Fifo(), preempt=False, reclaim=False, max_reservations=4)
    result = cycle(Snapshot(c, gangs, hold), config, now=10.0)
    r = result.reservations
    assert set(r) == {"g1", "g2"} and not set(r["g1"].nodes) & set(r["g2"].nodes)
    assert r["g1"].expected_start < r["g2"].expected_start  # the first in order gets the earliest


def _full_cluster() -> tuple[ClusterState, list[Running]]:
    c = cluster(node("a", gpus=2))
    low = job("low", priority=-100, checkpointable=True)
    other = job("other", priority=-100, checkpointable=False)
    return c, [running(c, low, [(0, (0,))]), running(c, other, [(0, (1,))])]


def test_a_higher_priority_job_evicts_the_cheapest_victim_and_reserves_its_room() -> None:
    c, hold = _full_cluster()
    high = job("high", priority=100)
    result = cycle(Snapshot(c, [high], hold), now=5000.0)
    preempts = [i for i in result.intents if isinstance(i, Preempt)]
    # Both victims are best-effort; the checkpointable one loses only its restart overhead.
    assert [(p.victim, p.by) for p in preempts] == [("low", "high")]
    assert preempts[0].grace_s == CycleConfig(profile()).grace_s
    assert result.reservations["high"].preemption and result.reservations["high"].nodes == (0,)
    assert not result.placed  # the room is free only once the victim is gone
    # It reserved as EASY's head in allocate first; only the reservation it ends with is announced.
    assert [i.reservation for i in result.of(Reserve)] == [result.reservations["high"]]


def test_no_preemption_for_equal_priority_or_a_victim_younger_than_its_minimum_run() -> None:
    c, hold = _full_cluster()
    same = job("same", priority=-100)
    assert not cycle(Snapshot(c, [same], hold), now=5000.0).of(Preempt)
    young = [replace(r, started=4900.0) for r in hold]
    result = cycle(Snapshot(c, [job("high", priority=100)], young), now=5000.0)
    assert not result.of(Preempt)
    assert result.wake_at == 4900.0 + CycleConfig(profile()).min_runtime_s


def test_work_that_cannot_checkpoint_is_not_killed_for_a_job_whose_room_frees_sooner() -> None:
    """``weigh_loss``: the victims' lost GPU-seconds against the preemptor's wait (so far plus
    until its earliest slot, by the estimates) times its GPUs."""
    c = cluster(node("a", gpus=1))
    long = job("long", priority=-100, checkpointable=False, duration_s=36_000.0)  # ends at 36,000
    hold = [running(c, long, [(0, (0,))])]
    now = 35_400.0  # it would lose 35,400 GPU-s; the high job's room frees in 600 s
    fresh = job("high", priority=100, submitted=now)
    assert not cycle(Snapshot(c, [fresh], hold), now=now).of(Preempt)
    unweighed = CycleConfig(profile(), weigh_loss=False)
    assert [p.victim for p in cycle(Snapshot(c, [fresh], hold), unweighed, now=now).of(Preempt)] == ["long"]
    # A job that has already waited as long as the victim ran may evict it.
    old = job("high", priority=100, submitted=0.0)
    assert [p.victim for p in cycle(Snapshot(c, [old], hold), now=now).of(Preempt)] == ["long"]
    # A checkpointable victim loses one restart: evicted at once.
    saved = [running(cluster(node("a", gpus=1)), replace(long, checkpointable=True), [(0, (0,))])]
    assert [p.victim for p in cycle(Snapshot(c, [fresh], saved), now=now).of(Preempt)] == ["long"]


def test_cpu_work_is_weighed_as_gpu_work_is_by_dominant_share() -> None:
    """A CPU job's lost work and wait count by its share of the cluster's CPUs: its GPU-seconds
    (0) would make a CPU victim lose nothing, so it was killed however long it had run."""
    c = cluster(node("cpu", cpu=32_000, gpus=0))
    whole, half = task(cpu=32_000), task(cpu=16_000)
    long = job("long", shape=whole, priority=-100, checkpointable=False, duration_s=36_000.0)
    hold = [running(c, long, [(0, ())])]
    now = 35_400.0  # it would lose 35,400 s of the whole cluster; the room frees in 600 s
    fresh = job("high", shape=half, priority=100, submitted=now)
    assert not cycle(Snapshot(c, [fresh], hold), now=now).of(Preempt)
    # Half the cluster for 71,000 s waited outweighs the whole of it for 35,400 s.
    old = job("high", shape=half, priority=100, submitted=now - 71_000.0)
    assert [p.victim for p in cycle(Snapshot(c, [old], hold), now=now).of(Preempt)] == ["long"]
    assert not cycle(Snapshot(c, [replace(old, submitted=now - 70_000.0)], hold), now=now).of(Preempt)


def test_a_job_preempted_its_maximum_times_is_not_evicted_again() -> None:
    c, hold = _full_cluster()
    worn = [replace(r, job=replace(r.job, preemptions=3)) for r in hold]
    assert not cycle(Snapshot(c, [job("high", priority=100)], worn), now=5000.0).of(Preempt)


def test_among_equally_cheap_victims_those_evicted_least_so_far_go_first() -> None:
    """``spread_evictions``: a job evicted its maximum times pins its node against every later
    preemptor, so at a tie the eviction goes to the job with fewer behind it, on a node and
    between nodes.  Off (as for the baselines), the tie goes by job id and node order."""
    on, off = CycleConfig(profile()), CycleConfig(profile(), spread_evictions=False)
    high = job("high", priority=100)
    for c in (cluster(node("a", gpus=2)), cluster(node("a", gpus=1), node("b", gpus=1))):
        slots = [(0, (0,)), (0, (1,))] if c.size == 1 else [(0, (0,)), (1, (0,))]
        worn = job("a-twice", priority=-100, checkpointable=True, preemptions=2)
        fresh = job("b-never", priority=-100, checkpointable=True)
        hold = [running(c, worn, [slots[0]]), running(c, fresh, [slots[1]])]
        for config, victim in ((on, "b-never"), (off, "a-twice")):
            result = cycle(Snapshot(c, [high], hold), config, now=5000.0)
            assert [p.victim for p in result.of(Preempt)] == [victim]


def test_across_queues_only_borrowed_capacity_is_reclaimed() -> None:
    c = cluster(node("a", gpus=4))
    tree = QueueTree([QueueSpec("owner", guarantee=vector(gpu=2000)), QueueSpec("borrower")])
    borrowed = [running(c, job(f"b{i}", queue="borrower"), [(0, (i,))]) for i in range(4)]
    want = job("mine", queue="owner")
    result = cycle(Snapshot(c, [want], borrowed, queues=tree), now=5000.0)
    assert len(result.of(Preempt)) == 1
    # With its guarantee in use, the owner reclaims nothing more.
    mine = [running(cluster(node("a", gpus=4)), job(f"m{i}", queue="owner"), [(0, (i,))]) for i in range(2)]
    c2 = cluster(node("a", gpus=4))
    hold = [running(c2, r.job, [(0, r.placements[0].gpus)]) for r in mine]
    hold += [running(c2, job(f"b{i}", queue="borrower"), [(0, (2 + i,))]) for i in range(2)]
    assert not cycle(Snapshot(c2, [job("more", queue="owner")], hold, queues=tree), now=5000.0).of(Preempt)


def _fill(c: ClusterState, queue: str, count: int, start: int) -> list[Running]:
    """``count`` checkpointable one-GPU jobs of ``queue`` on the 8-GPU nodes of ``c``, from
    slot ``start`` on."""
    slots = [(k // 8, (k % 8,)) for k in range(start, start + count)]
    jobs = [job(f"{queue}{k}", queue=queue, checkpointable=True) for k in range(count)]
    return [running(c, j, [s]) for j, s in zip(jobs, slots, strict=True)]


def test_reclaim_does_not_count_victims_already_leaving_as_borrowed() -> None:
    """Live, a queue's victims took a second or two to stop; every cycle in between saw their
    queue still borrowing and evicted again (26 evictions for 16 GPUs borrowed)."""
    c = cluster(node("a", gpus=8), node("b", gpus=8))
    halves = [QueueSpec("red", guarantee=vector(gpu=8000)), QueueSpec("blue", guarantee=vector(gpu=8000))]
    tree = QueueTree(halves)
    reds = _fill(c, "red", 11, 0)
    # Three of red's jobs are being evicted: once they stop red holds its guarantee, no more.
    hold = [replace(r, preempting=True, leaving=1) if k < 3 else r for k, r in enumerate(reds)]
    hold += _fill(c, "blue", 5, 11)
    result = cycle(Snapshot(c, [job("more", queue="blue")], hold, queues=tree), now=5000.0)
    assert not result.of(Preempt)
    # Before they were asked to leave, red borrowed 3 and reclaim takes one back.
    result = cycle(Snapshot(c, [job("more", queue="blue")], reds + hold[11:], queues=tree), now=5000.0)
    assert [p.reason for p in result.of(Preempt)] == ["reclaim"]  # the rule that let it, alone


def test_reclaim_counts_the_room_a_preemptor_holds_as_its_queues() -> None:
    """A preemptor holds its victims' room until it starts: its queue is using that room, so
    another job of the queue may not reclaim beyond the guarantee meanwhile."""
    tree = QueueTree(
        [
            QueueSpec("red", guarantee=vector(gpu=8000)),
            QueueSpec("blue", guarantee=vector(gpu=4000)),
            QueueSpec("green", guarantee=vector(gpu=4000)),
        ]
    )
    more = job("more", queue="blue", submitted=2.0)

    def reclaims(holders: int) -> list[str]:
        """Victims for ``more`` while ``holders`` blue preemptors wait for one red victim each."""
        c = cluster(node("a", gpus=8), node("b", gpus=8))
        reds = _fill(c, "red", 12, 0)
        hold = [replace(r, preempting=True, leaving=1) if k < holders else r for k, r in enumerate(reds)]
        hold += _fill(c, "blue", 2, 12) + _fill(c, "green", 2, 14)
        held = [job(f"held{k}", queue="blue", submitted=1.0) for k in range(holders)]
        reservations = {j.id: Reservation(j.id, (0,), 4990.0, 5010.0, 6000.0, preemption=True) for j in held}
        result = cycle(Snapshot(c, [*held, more], hold, queues=tree, reservations=reservations), now=5000.0)
        return [p.victim for p in result.of(Preempt)]

    assert reclaims(2) == []  # blue's 2 running and 2 held are its whole guarantee
    assert len(reclaims(1)) == 1 and reclaims(1)[0].startswith("red")  # 3 of 4: one more is its due


def test_a_queues_max_counts_its_tasks_on_their_way_out() -> None:
    """Tasks being evicted are no longer their queue's for its guarantee, but they hold their
    room until they stop: a job placed meanwhile would take the queue past its max (a chaos run
    counted 2 such placements)."""
    c = cluster(node("a", gpus=4))
    capped = QueueSpec("capped", max=vector(gpu=2000, cpu=1e18, memory=1e18))
    tree = QueueTree([capped, QueueSpec("other")])
    hold = [running(c, job(f"c{i}", queue="capped", checkpointable=True), [(0, (i,))]) for i in range(2)]
    more = job("more", queue="capped")
    assert "more" not in cycle(Snapshot(c, [more], hold, queues=tree), now=5000.0).placed  # at its max
    leaving = [replace(hold[0], preempting=True, leaving=1), hold[1]]
    result = cycle(Snapshot(c, [more], leaving, queues=tree), now=5000.0)
    assert "more" not in result.placed and result.unschedulable["more"].plugin == "QueueMax"
    # Within one cycle too: a victim evicted for a starving job of another queue frees no room
    # under the max for the rest of the cycle.
    c = cluster(node("a", gpus=4), node("b", gpus=2))
    tree = QueueTree([capped, QueueSpec("other", preempt_after_s=1.0)])
    hold = [running(c, job(f"c{i}", queue="capped", checkpointable=True), [(i, (0,))]) for i in range(2)]
    top = job("top", gpus=4, queue="other", priority=100, submitted=1.0)
    result = cycle(Snapshot(c, [top, replace(more, submitted=2.0)], hold, queues=tree), now=5000.0)
    assert [p.victim for p in result.of(Preempt)] == ["c0"]
    assert "more" not in result.placed  # b has a free GPU, but capped still holds 2 until c0 stops


def test_past_its_queues_preempt_after_a_job_may_evict_lower_priority_work_of_any_queue() -> None:
    """The source article's case: a large job that waited a day may take room from smaller,
    lower-priority work anywhere, not only in its own queue; never from an equal priority."""
    c = cluster(node("a", gpus=2))
    tree = QueueTree([QueueSpec("mine", preempt_after_s=3600.0), QueueSpec("theirs", preempt_after_s=3600.0)])
    # Each queue holds its deserved GPU, so nothing is reclaimed; the job needs both.
    hold = [
        running(c, job("own", queue="mine", checkpointable=True), [(0, (0,))]),
        running(c, job("other", queue="theirs", checkpointable=True), [(0, (1,))]),
    ]
    big = job("big", gpus=2, queue="mine", priority=100, submitted=0.0)
    early = cycle(Snapshot(c, [big], hold, queues=tree), now=3000.0)
    assert not early.of(Preempt)  # its own queue's job alone does not make room
    assert early.wake_at == 3600.0  # the shell runs a cycle when the rule starts to apply
    late = cycle(Snapshot(c, [big], hold, queues=tree), now=4000.0)
    assert sorted(p.victim for p in late.of(Preempt)) == ["other", "own"]
    equal = replace(big, priority=0)
    assert not cycle(Snapshot(c, [equal], hold, queues=tree), now=4000.0).of(Preempt)
    # Set on a parent, it acts through the leaf queues the jobs live in.
    nested = QueueTree(
        [QueueSpec("org", preempt_after_s=3600.0), QueueSpec("mine", parent="org"), QueueSpec("theirs")]
    )
    assert sorted(
        p.victim for p in cycle(Snapshot(c, [big], hold, queues=nested), now=4000.0).of(Preempt)
    ) == [
        "other",
        "own",
    ]


def test_a_job_may_preempt_at_the_very_moment_its_queue_woke_a_cycle_for() -> None:
    """The cycle asks to be woken at ``since + after``; at that ``now`` the rule applies, even
    where ``now - since`` rounds to just below ``after`` (as it does for this ``since``)."""
    since, after = 2057308.3292827795, 86400.0
    assert (since + after) - since < after  # the rounding this test is about
    c = cluster(node("a", gpus=2))
    tree = QueueTree([QueueSpec("mine", preempt_after_s=after), QueueSpec("theirs", preempt_after_s=after)])
    hold = [
        running(c, job("own", queue="mine", checkpointable=True), [(0, (0,))]),
        running(c, job("other", queue="theirs", checkpointable=True), [(0, (1,))]),
    ]
    big = job("big", gpus=2, queue="mine", priority=100, submitted=since)
    before = cycle(Snapshot(c, [big], hold, queues=tree), now=since + after - 10.0)
    assert before.wake_at == since + after
    woken = cycle(Snapshot(c, [big], hold, queues=tree), now=before.wake_at)
    assert sorted(p.victim for p in woken.of(Preempt)) == ["other", "own"]


def test_an_elastic_job_shrinks_instead_of_a_job_being_preempted() -> None:
    c = cluster(node("a", gpus=4))
    elastic = job("el", replicas=3, min_replicas=1, priority=-100)
    rigid = job("rigid", priority=-100)
    hold = [running(c, elastic, [(0, (0,)), (0, (1,)), (0, (2,))]), running(c, rigid, [(0, (3,))])]
    result = cycle(Snapshot(c, [job("high", priority=100)], hold), now=5000.0)
    assert not result.of(Preempt)
    resize = next(i for i in result.intents if isinstance(i, Resize))
    assert (resize.job, resize.replicas, resize.removed, resize.by) == ("el", 2, (2,), "high")


def test_a_young_checkpointable_elastic_job_is_shrunk_but_never_evicted_whole() -> None:
    """``min_runtime_s`` protects a start from an eviction, not from a shrink, which keeps the
    job running at one restart's cost: room an elastic job just grew into is given back."""
    c = cluster(node("a", gpus=4))
    elastic = job("el", replicas=4, min_replicas=1, priority=-100, checkpointable=True)
    hold = [running(c, elastic, [(0, (g,)) for g in range(4)], started=4900.0)]  # 100 s ago
    config = CycleConfig(profile(), min_runtime_s=600.0)
    result = cycle(Snapshot(c, [job("high", gpus=2, priority=100)], hold), config, now=5000.0)
    resize = next(i for i in result.intents if isinstance(i, Resize))
    assert (resize.replicas, resize.removed) == (2, (2, 3)) and not result.of(Preempt)
    # Asking for more than the shrink can give: nothing (the whole job is still protected).
    result = cycle(Snapshot(c, [job("huge", gpus=4, priority=100)], hold), config, now=5000.0)
    assert not result.of(Resize) and not result.of(Preempt)
    # A young elastic job that cannot checkpoint keeps its protection whole.
    rigid = replace(elastic, checkpointable=False)
    c2 = cluster(node("a", gpus=4))
    hold2 = [running(c2, rigid, [(0, (g,)) for g in range(4)], started=4900.0)]
    result = cycle(Snapshot(c2, [job("high", gpus=2, priority=100)], hold2), config, now=5000.0)
    assert not result.of(Resize) and not result.of(Preempt)


def test_a_running_elastic_job_grows_into_idle_room() -> None:
    c = cluster(node("a", gpus=4))
    elastic = job("el", replicas=4, min_replicas=1, checkpointable=True)
    hold = [running(c, elastic, [(0, (0,))])]
    result = cycle(Snapshot(c, [], hold))
    resize = next(i for i in result.intents if isinstance(i, Resize))
    assert resize.replicas == 4 and len(resize.added) == 3 and not resize.removed


def test_an_elastic_job_that_cannot_checkpoint_does_not_grow() -> None:
    """A grow restarts every replica at the new size: without a checkpoint it would start over."""
    c = cluster(node("a", gpus=4))
    elastic = job("el", replicas=4, min_replicas=1, checkpointable=False)
    hold = [running(c, elastic, [(0, (0,))])]
    assert not cycle(Snapshot(c, [], hold)).of(Resize)


def test_an_elastic_job_starts_at_its_minimum_when_room_is_short() -> None:
    c = cluster(node("a", gpus=2))
    result = cycle(Snapshot(c, [job("el", replicas=8, min_replicas=2)]))
    assert len(result.placed["el"]) == 2


def test_las_preempts_the_job_with_the_most_service() -> None:
    c = cluster(node("a", gpus=1))
    veteran = replace(job("veteran"), attained_gpu_s=50_000.0)
    hold = [running(c, veteran, [(0, (0,))], started=0.0)]
    config = CycleConfig(
        profile(), order=LeastAttained(), fair_share=False, preempt=False, reclaim=False, min_runtime_s=0.0
    )
    result = cycle(Snapshot(c, [job("fresh")], hold), config, now=100.0)
    assert [p.victim for p in result.of(Preempt)] == ["veteran"]


def test_the_same_snapshot_and_seed_give_the_same_intents() -> None:
    c = cluster(*(node(f"n{i}", gpus=8) for i in range(6)))
    jobs = [job(f"j{i}", gpus=1 + i % 4, submitted=float(i), queue=f"q{i % 3}") for i in range(40)]
    config = CycleConfig(profile(*(j.shape for j in jobs)))
    a = run_cycle(Snapshot(c, jobs), config, 10.0, np.random.default_rng(5))
    b = run_cycle(Snapshot(c, jobs), config, 10.0, np.random.default_rng(5))
    assert a.intents == b.intents and a.unschedulable == b.unschedulable


def test_placements_are_always_in_the_callers_node_indices() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    result = cycle(Snapshot(c, [job("j", replicas=2)]))
    for p in result.placed["j"]:
        assert isinstance(p, Placement) and c.fits(p.node, p.task, p.gpus)


def test_a_node_that_is_not_schedulable_gets_no_new_work_nor_a_preemptor() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    c.schedulable[0] = False  # cordoned or NotReady
    result = cycle(Snapshot(c, [job("x", gpus=1), job("y", gpus=1), job("z", gpus=1)]))
    assert {p.node for ps in result.placed.values() for p in ps} == {1}
    assert len(result.placed) == 2 and "z" in result.unschedulable
    # A preemptor never evicts on a node it may not use, even when the victims there are cheaper.
    c2 = cluster(node("a", gpus=2), node("b", gpus=2))
    cheap = job("cheap", gpus=2, priority=-100, checkpointable=True)
    dear = job("dear", gpus=2, priority=0)
    hold = [running(c2, cheap, [(0, (0, 1))]), running(c2, dear, [(1, (0, 1))])]
    c2.schedulable[0] = False
    result = cycle(Snapshot(c2, [job("high", gpus=2, priority=100)], hold), now=5000.0)
    assert [p.victim for p in result.of(Preempt)] == ["dear"]
    assert result.reservations["high"].nodes == (1,)


def test_a_preemptor_never_takes_the_room_freed_for_another_preemptor() -> None:
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    leaving = replace(running(c, job("victim", gpus=2, priority=-100), [(1, (0, 1))]), preempting=True)
    first = job("first", gpus=2, priority=100)  # its victim on b is still leaving
    second = job("second", gpus=2, priority=100)  # its victims on a are gone
    reservations = {
        "first": Reservation("first", (1,), 5.0, 1030.0, 5000.0, preemption=True),
        "second": Reservation("second", (0,), 10.0, 1030.0, 5000.0, preemption=True),
    }
    result = cycle(Snapshot(c, [first, second], [leaving], reservations=reservations))
    assert {j: [p.node for p in ps] for j, ps in result.placed.items()} == {"second": [0]}


def test_the_pruned_earliest_slot_search_finds_what_replaying_every_node_finds() -> None:
    """``reserve.earliest`` skips nodes that cannot beat the slots it holds; on random busy
    clusters (run times drawn from few values, so ties abound) it must choose exactly what
    sorting every node's every slot chooses."""
    from shared.core.actions import reserve
    from shared.core.actions.context import CycleContext
    from shared.core.actions.preempt import _slot_bound
    from shared.core.queues import open_tree

    def brute(ctx: CycleContext, j: Job, nodes: np.ndarray) -> tuple[tuple[int, ...], float] | None:
        slots = sorted((t, n) for n in nodes.tolist() for t in reserve.node_slots(ctx, n, j.shape, j.fewest))
        if len(slots) < j.fewest:
            return None
        chosen = slots[: j.fewest]
        return tuple(sorted({n for _, n in chosen})), chosen[-1][0]

    rng = np.random.default_rng(7)
    for trial in range(40):
        c = cluster(
            *(node(f"n{i}", gpus=int(rng.choice([2, 4, 8]))) for i in range(int(rng.integers(3, 12))))
        )
        hold = []
        for k in range(int(rng.integers(0, 40))):
            free = [
                (n, g) for n in range(c.size) for g in range(int(c.gpu_count[n])) if c.gpu_free[n, g] == 1000
            ]
            if not free:
                break
            n, g = free[int(rng.integers(len(free)))]
            estimate = float(rng.choice([100.0, 500.0, 900.0]))
            hold.append(running(c, job(f"r{k}", duration_s=estimate), [(n, (g,))], started=0.0))
        ctx = CycleContext(
            Snapshot(c, [], hold), CycleConfig(profile()), 1000.0, np.random.default_rng(0), open_tree(["q"])
        )
        for gpus, replicas in ((1, 1), (2, 3), (4, 2), (8, 1), (1, 5)):
            big = job(f"big{trial}", gpus=gpus, replicas=replicas)
            nodes = reserve.candidates(ctx, big)
            found = reserve.earliest(ctx, big, nodes)
            assert found == brute(ctx, big, nodes), (trial, gpus, replicas)
            # The weighing's cheap bound never promises a later slot than the search finds.
            if found is not None:
                assert _slot_bound(ctx, big, nodes) <= found[1], (trial, gpus, replicas)


def test_after_a_preemption_the_release_rows_are_what_a_full_rebuild_gives() -> None:
    """A committed preemption updates only its victims' nodes in the reservation stage's release
    index (they now leave within their grace); that must equal rebuilding it from scratch."""
    from shared.core.actions import allocate, enqueue, preempt, reserve
    from shared.core.actions.context import CycleContext
    from shared.core.queues import open_tree

    c = cluster(node("a", gpus=4), node("b", gpus=4), node("c", gpus=2))
    hold = []
    for k, (n, g) in enumerate([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)]):
        low = job(f"low{k}", priority=-100, checkpointable=k % 2 == 0, duration_s=100.0 * (k + 1))
        hold.append(running(c, low, [(n, (g,))], started=0.0))
    pending = [job("high", gpus=4, priority=100), job("mid", gpus=2, priority=0), job("one")]
    snapshot = Snapshot(c, pending, hold)
    ctx = CycleContext(
        snapshot, CycleConfig(profile(), min_runtime_s=0), 5000.0, np.random.default_rng(0), open_tree(["q"])
    )
    enqueue.run(ctx)
    allocate.run(ctx)
    reserve.release_index(ctx)
    preempt.run(ctx)
    assert ctx.evicting, "the test needs a preemption"
    kept = ctx.release
    ctx.release = None
    assert kept == reserve.release_index(ctx)


def test_a_memo_that_follows_the_running_jobs_changes_no_decision() -> None:
    """A shell's memo keeps the victim rows between cycles and follows each snapshot's delta
    (jobs gone, changed jobs moved to the end, new ones appended): over a run of such
    snapshots, every cycle must decide exactly what it decides without the memo, and the rows
    must be those laid out from scratch."""
    from shared.core.actions.preempt import VictimRows
    from shared.core.memo import CycleMemo, RunningDelta

    rng = np.random.default_rng(3)
    c = cluster(*(node(f"n{i}", gpus=4) for i in range(6)))
    runs: dict[str, Running] = {}
    serial = 0

    def start(started: float) -> None:
        nonlocal serial
        free = [(n, g) for n in range(c.size) for g in range(4) if c.gpu_free[n, g] == 1000]
        if not free:
            return
        n, g = free[int(rng.integers(len(free)))]
        queue = str(rng.choice(["qa", "qb", "qc"]))
        j = job(
            f"r{serial}", queue=queue, priority=int(rng.choice([-100, 0])), checkpointable=bool(serial % 2)
        )
        runs[j.id] = running(c, j, [(n, (g,))], started=started)
        serial += 1

    for _ in range(20):
        start(0.0)
    memo = CycleMemo()
    config = CycleConfig(profile(), min_runtime_s=0)
    for generation in range(1, 9):
        removed: set[str] = set()
        appended = 0
        for job_id in list(runs)[:: int(rng.integers(3, 6))]:  # some end
            for p in runs.pop(job_id).placements:
                c.remove(p)
            removed.add(job_id)
        for job_id in list(runs)[:: int(rng.integers(4, 8))]:  # some change: out, then in at the end
            r = runs.pop(job_id)
            runs[job_id] = Running(r.job, r.placements, r.started + 1.0)
            removed.add(job_id)
            appended += 1
        before = len(runs)
        for _ in range(int(rng.integers(0, 6))):
            start(float(generation))
        appended += len(runs) - before
        delta = RunningDelta(generation, generation - 1, frozenset(removed), appended)
        pending = [
            job(f"hi{generation}-{k}", gpus=int(rng.choice([1, 2, 4])), priority=100, queue="qa")
            for k in range(3)
        ]
        plain = Snapshot(c, pending, list(runs.values()))
        with_memo = replace(plain, memo=memo, running_delta=delta)
        expect = cycle(plain, config, now=5000.0)
        got = cycle(with_memo, config, now=5000.0)
        assert got.intents == expect.intents and got.unschedulable == expect.unschedulable
        if isinstance(memo.victim_rows, VictimRows):
            fresh = VictimRows.of(list(runs.values()))
            kept = memo.victim_rows
            assert kept.ids.tolist() == fresh.ids.tolist()
            assert (kept.table == fresh.table).all() and (kept.facts == fresh.facts).all()
            assert (kept.counts == fresh.counts).all()
    assert isinstance(memo.victim_rows, VictimRows) and memo.generation == 8


def test_an_elastic_job_does_not_grow_into_room_another_workers_waiting_job_can_use() -> None:
    """A placement worker acts on its own jobs only: growth waits while a job it may not act on
    (another worker's) could start in the idle room, which that worker is about to fill."""
    c = cluster(node("a", gpus=4))
    elastic = job("el", replicas=4, min_replicas=1, checkpointable=True)
    hold = [running(c, elastic, [(0, (0,))])]
    other = job("theirs", gpus=2)
    mine = cycle(Snapshot(c, [other], hold, actionable=frozenset({"el"})))
    assert not mine.of(Resize) and not mine.placed
    # Alone (every job its own), the cycle places the waiting job and grows into what is left.
    alone = cycle(Snapshot(c, [other], hold))
    resize = next(i for i in alone.intents if isinstance(i, Resize))
    assert "theirs" in alone.placed and resize.replicas == 2
    # Nobody else waiting: it grows.
    assert cycle(Snapshot(c, [], hold, actionable=frozenset({"el"}))).of(Resize)


def test_a_memo_follows_the_pending_jobs_and_changes_no_decision() -> None:
    """With the pending jobs' changes handed over (``PendingDelta``), enqueue keeps their demand
    and order in the memo and sorts in only the jobs that arrived: every cycle must decide what
    it decides without the memo, and the kept order and sums must be those built afresh."""
    from shared.core.actions.enqueue import PendingOrder
    from shared.core.memo import CycleMemo, PendingDelta

    rng = np.random.default_rng(5)
    c = cluster(*(node(f"n{i}", gpus=4) for i in range(3)))
    hold = [running(c, job(f"r{i}", queue="qa"), [(i % 3, (i // 3,))]) for i in range(9)]
    tree = QueueTree([QueueSpec("qa", guarantee=vector(gpu=6000)), QueueSpec("qb", weight=2.0)])
    pending: dict[str, Job] = {}
    serial = 0
    memo = CycleMemo()
    config = CycleConfig(profile(task(gpus=1), task(gpus=2), task(gpus=4)), min_runtime_s=0)
    for generation in range(1, 13):
        removed: set[str] = set()
        added: list[Job] = []
        for job_id in list(pending)[:: int(rng.integers(3, 7))]:  # some start
            del pending[job_id]
            removed.add(job_id)
        for job_id in list(pending)[:: int(rng.integers(4, 9))]:  # some change: out, then in again
            j = pending.pop(job_id)
            pending[job_id] = replace(j, queued_since=float(generation), attempt=j.attempt + 1)
            removed.add(job_id)
            added.append(pending[job_id])
        for _ in range(int(rng.integers(0, 8))):  # some arrive
            j = job(
                f"p{serial}",
                gpus=int(rng.choice([1, 2, 4])),
                queue=str(rng.choice(["qa", "qb", "elsewhere"])),
                priority=int(rng.choice([0, 100])),
                submitted=float(rng.integers(0, 50)),
            )
            pending[j.id] = j
            added.append(j)
            serial += 1
        delta = PendingDelta(generation, generation - 1, frozenset(removed), tuple(added))
        plain = Snapshot(c, list(pending.values()), hold, queues=tree)
        expect = cycle(plain, config, now=100.0)
        got = cycle(replace(plain, memo=memo, pending_delta=delta), config, now=100.0)
        assert got.intents == expect.intents and got.unschedulable == expect.unschedulable
        kept = memo.pending_order
        assert isinstance(kept, PendingOrder) and kept.generation == generation
        fresh = PendingOrder(generation, config.order, True, tree)
        for j in plain.pending:
            fresh.add(j, 100.0, plain.estimator)
        assert kept.members == fresh.members and kept.sums == fresh.sums and kept.counts == fresh.counts
    assert serial > 20 and len(pending) > 5
    # A delta that does not start where the memo is, or an order that reads the clock, is not
    # followed: the cycle builds afresh and decides the same.
    stale = PendingDelta(40, 30, frozenset(), ())
    plain = Snapshot(c, list(pending.values()), hold, queues=tree)
    assert cycle(replace(plain, memo=memo, pending_delta=stale), config, now=100.0).intents == (
        cycle(plain, config, now=100.0).intents
    )
    las = replace(config, order=LeastAttained())
    cycle(replace(plain, memo=memo, pending_delta=PendingDelta(41, 40, frozenset(), ())), las, now=100.0)
    assert memo.pending_order is None


def test_reclaim_for_many_small_jobs_evicts_on_one_node_for_several_preemptors_at_once() -> None:
    """Each preemption reservation used to close its node to every other preemptor, so a queue
    reclaiming 1-GPU jobs got one eviction per node per round (a round: as long as the victims
    take to stop, up to the grace): 16 GPUs on 4 nodes took 4 rounds.  Preemptors now share a
    node, each counting only the room its own victims free."""
    c = cluster(*(node(n, gpus=8) for n in "abcd"))
    tree = QueueTree([QueueSpec(q, guarantee=vector(gpu=16000)) for q in ("red", "blue")])
    reds = _fill(c, "red", 32, 0)
    blues = [job(f"blue{k}", queue="blue", submitted=float(k)) for k in range(16)]
    result = cycle(Snapshot(c, blues, reds, queues=tree), now=5000.0)
    victims = [p.victim for p in result.of(Preempt)]
    assert len(victims) == 16 and len(set(victims)) == 16  # all in one round, no victim twice
    held = result.reservations
    assert sorted(held) == sorted(b.id for b in blues) and all(r.preemption for r in held.values())
    # The next cycle, once every victim has stopped, starts all 16, four per node.
    c2 = cluster(*(node(n, gpus=8) for n in "abcd"))
    kept = [r for r in reds if r.job.id not in victims]
    stay = [running(c2, r.job, [(p.node, p.gpus) for p in r.placements]) for r in kept]
    after = cycle(Snapshot(c2, blues, stay, queues=tree, reservations=held), now=5001.0)
    assert sorted(after.placed) == sorted(b.id for b in blues) and not after.of(Preempt)
    # The baselines keep one preemptor per node: four evictions a round.
    alone = CycleConfig(profile(), share_preempted_nodes=False)
    assert len(cycle(Snapshot(c, blues, reds, queues=tree), alone, now=5000.0).of(Preempt)) == 4


def test_a_preemptor_sharing_a_node_counts_only_the_room_its_own_victims_free() -> None:
    """Room on its way out is already promised to the preemptor that asked for it: a second
    preemptor on the node may take what is left over, no more, and evicts for the rest."""
    c = cluster(node("a", gpus=8))
    big = running(c, job("big", gpus=4, priority=-100, checkpointable=True), [(0, (0, 1, 2, 3))])
    smalls = [running(c, job(f"s{i}", priority=-100, checkpointable=True), [(0, (4 + i,))]) for i in range(4)]
    leaving = replace(big, preempting=True, leaving=1)
    first = job("first", gpus=3, priority=100, submitted=1.0)  # big's 4 GPUs are freed for it
    held = {"first": Reservation("first", (0,), 4990.0, 5030.0, 6000.0, preemption=True)}

    def victims(gpus: int) -> list[str]:
        second = job("second", gpus=gpus, priority=100, submitted=2.0)
        snap = Snapshot(c, [first, second], [leaving, *smalls], reservations=held)
        result = cycle(snap, now=5000.0)
        assert result.reservations["second"].preemption and result.reservations["second"].nodes == (0,)
        return sorted(p.victim for p in result.of(Preempt))

    assert victims(1) == []  # big frees one GPU more than first needs: that one is second's
    assert victims(2) == ["s0"]  # one left over, one more to free (the cheapest: by id at a tie)


def test_a_reservation_holder_searches_for_victims_even_after_a_sibling_without_one_failed() -> None:
    """The victim search skips a job whose twin (queue, priority, shape, starvation) found none
    earlier in the cycle, but not a job that holds a reservation: its own nodes are open to it
    alone (found tracing a 32-GPU gang of Philly's large-jobs run, history.md)."""
    c = cluster(node("a", gpus=2), node("b", gpus=2))
    hold = [
        running(c, job("low", gpus=2, priority=-100, checkpointable=True), [(0, (0, 1))]),
        running(c, job("peer", gpus=2, priority=100), [(1, (0, 1))]),
    ]
    first = job("first", gpus=2, priority=100, submitted=0.0)  # older: searched first
    holder = job("holder", gpus=2, priority=100, submitted=10.0)
    held = {"holder": Reservation("holder", (0,), since=20.0, expected_start=9000.0, timeout_at=20000.0)}
    result = cycle(Snapshot(c, [first, holder], hold, reservations=held), now=5000.0)
    # "first" may use node b only, where its peer runs at its own priority: nothing to evict.
    # "holder" evicts the best-effort job on the node held for it.
    assert [(p.victim, p.by) for p in result.of(Preempt)] == [("low", "holder")]
    assert result.reservations["holder"].preemption
