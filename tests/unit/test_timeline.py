"""The timeline simulator's inputs and protocol: offered load, the openb window and node sample,
the Philly workload, and jobs that wait, run whole and end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.cli.simulate import node_sample
from shared.core.fragmentation import TypicalWorkload
from shared.core.queues import QueueSpec, QueueTree
from shared.core.registry import build_profile
from shared.core.task import NodeSpec, TaskShape
from shared.sim.metrics import summarise
from shared.sim.policies import timeline_config
from shared.sim.report import plot_queue_shares
from shared.sim.timeline import TimelineResult, run_timeline
from shared.sim.workload import SimJob, Workload, busy_window_start, offered_load, philly_workload

PHILLY = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "philly"
GPU = TaskShape(1000, 1024, 1, 1000)


def sim_job(job_id: str, submit: float, work: float, shape: TaskShape = GPU, replicas: int = 1) -> SimJob:
    return SimJob(job_id, "q", "t", shape, replicas, submit, work, duration_s=work)


def test_offered_load_counts_only_what_runs_inside_the_window() -> None:
    # One GPU, window 0..100: a job of 50 s at 0, a job at 100 running for a year (none of it inside).
    jobs = [sim_job("a", 0, 50), sim_job("b", 100, 3e7)]
    assert offered_load(jobs, 1) == pytest.approx(0.5)
    # From t=50 on only what runs after 50 counts: nothing of a, nothing of b.
    assert offered_load(jobs, 1, start=50) == pytest.approx(0.0)
    assert offered_load([sim_job("c", 0, 200), sim_job("d", 100, 1)], 2, start=50) == pytest.approx(0.5)


def test_the_busy_window_starts_at_the_tenth_percentile_arrival() -> None:
    jobs = [sim_job(f"j{i}", float(t), 1) for i, t in enumerate([0, 1000, *range(2000, 2018)])]
    assert busy_window_start(jobs) == 2000.0


def test_the_node_sample_keeps_each_kind_in_proportion_and_at_least_one() -> None:
    nodes = [NodeSpec(f"a{i}", 8000, 8000, 8, "A100") for i in range(50)]
    nodes += [NodeSpec(f"t{i}", 8000, 8000, 1, "T4") for i in range(10)] + [NodeSpec("cpu", 64000, 8000)]
    sample = node_sample(nodes, 0.1)
    assert [n.name for n in sample] == ["a0", "a1", "a2", "a3", "a4", "t0", "cpu"]


def test_the_philly_workload_is_one_queue_per_vc_sized_for_the_load() -> None:
    w = philly_workload(PHILLY / "gavel-derived-per-vc-seed0", PHILLY / "gavel_isolated_throughputs.csv", 0.9)
    assert 0.85 <= w.offered_load() <= 0.9 + 1e-9
    assert {j.queue for j in w.jobs} == set(w.queues.leaves)
    big = [j for j in w.jobs if j.gpus > 8]
    assert big and all(j.shape.num_gpu <= 8 and j.replicas * j.shape.num_gpu == j.gpus for j in big)
    guarantees = sum(w.queues.specs[q].guarantee[0] for q in w.queues.leaves)
    assert guarantees <= w.total_gpus * 1000


def _run(jobs: list[SimJob], policy: str, gpus: int = 4) -> dict[str, object]:
    nodes = (NodeSpec("n0", 64_000, 65_536, gpus, "V100"),)
    w = Workload("t", nodes, tuple(jobs), QueueTree([QueueSpec("q")]))
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in jobs))
    return summarise(run_timeline(w, policy, timeline_config(policy, profile), 1))


def test_philly_jobs_declare_durations_only_when_asked_with_the_error_asked() -> None:
    folder, table = PHILLY / "gavel-derived-per-vc-seed0", PHILLY / "gavel_isolated_throughputs.csv"
    assert all(j.duration_s is None for j in philly_workload(folder, table, 0.9).jobs)  # as the trace is
    exact = philly_workload(folder, table, 0.9, duration_error=0.0)
    assert all(j.duration_s == j.work_s for j in exact.jobs)
    a = philly_workload(folder, table, 0.9, jitter_seed=42, duration_error=1.0)
    b = philly_workload(folder, table, 0.9, jitter_seed=43, duration_error=1.0)
    ratios = np.array([j.duration_s / j.work_s for j in a.jobs if j.duration_s is not None])
    assert ratios.size == len(a.jobs)
    # exp(N(0, 1)): the median error is about 1, a typical one a factor of e either way.
    assert 0.9 < float(np.median(ratios)) < 1.1
    assert 0.9 < float(np.std(np.log(ratios))) < 1.1
    assert [j.duration_s for j in a.jobs] != [j.duration_s for j in b.jobs]  # each seed its own draw
    assert [j.duration_s for j in a.jobs] == [
        j.duration_s for j in philly_workload(folder, table, 0.9, jitter_seed=42, duration_error=1.0).jobs
    ]
    assert a.notes["duration_error"] == 1.0
    with pytest.raises(ValueError, match="at least 0"):
        philly_workload(folder, table, 0.9, duration_error=-0.5)


def test_an_arrival_jitter_makes_each_seed_a_distinct_draw_of_the_same_philly_cluster() -> None:
    folder, table = PHILLY / "gavel-derived-per-vc-seed0", PHILLY / "gavel_isolated_throughputs.csv"
    plain = philly_workload(folder, table, 0.9)
    a = philly_workload(folder, table, 0.9, jitter_s=60.0, jitter_seed=42)
    b = philly_workload(folder, table, 0.9, jitter_s=60.0, jitter_seed=43)
    assert a.nodes == b.nodes == plain.nodes  # sized from the arrivals as they are
    quotas = [[(q.name, q.weight, tuple(q.guarantee)) for q in w.queues.specs.values()] for w in (a, plain)]
    assert quotas[0] == quotas[1]
    # Every arrival moves by [0, 60) s, so the k-th arrival does too.
    delays = sorted(x.submit - y.submit for x, y in zip(a.jobs, plain.jobs, strict=True))
    assert delays[0] >= 0.0 and delays[-1] < 60.0 and delays[len(delays) // 2] > 10.0
    # The same jobs, in another order within the trace's bursts: each seed its own.
    order_a, order_b = [j.work_s for j in a.jobs], [j.work_s for j in b.jobs]
    assert sorted(order_a) == sorted(order_b) and order_a != order_b
    assert [j.submit for j in philly_workload(folder, table, 0.9, jitter_s=60.0, jitter_seed=42).jobs] == [
        j.submit for j in a.jobs
    ]


def test_fifo_blocks_behind_a_job_that_does_not_fit_and_backfill_does_not() -> None:
    # 4 GPUs: a 3-GPU job runs 100 s; a 4-GPU job waits for it; a 1-GPU 50-s job arrives after.
    wide = TaskShape(3000, 1024, 3, 1000)
    full = TaskShape(4000, 1024, 4, 1000)
    jobs = [sim_job("a", 0, 100, wide), sim_job("b", 1, 10, full), sim_job("c", 2, 50)]
    fifo, backfill = _run(jobs, "fifo"), _run(jobs, "fifo-backfill")
    # FIFO: c waits behind b until b ends at 110; backfill: c runs at once in the idle GPU,
    # since it ends (52) before b can start (100).
    assert fifo["wait_p95_s"]["1"] > 100  # type: ignore[index]
    assert backfill["wait_p95_s"]["1"] < 1  # type: ignore[index]
    assert fifo["unfinished"] == backfill["unfinished"] == 0


def test_idle_gpus_are_counted_while_jobs_wait_and_work_left_past_the_window() -> None:
    # The FIFO case above, with a fourth job arriving at 200 s that runs 1,000 s: the window is
    # 0..200.  FIFO leaves one GPU idle from 1 s to 100 s while b and c wait (2,475 GPU-% s);
    # backfill only 1-2 s and 52-100 s (1,225).  Both run d after the window: 25% for 1,000 s.
    wide = TaskShape(3000, 1024, 3, 1000)
    full = TaskShape(4000, 1024, 4, 1000)
    jobs = [sim_job("a", 0, 100, wide), sim_job("b", 1, 10, full), sim_job("c", 2, 50)]
    jobs.append(sim_job("d", 200, 1000))
    fifo, backfill = _run(jobs, "fifo"), _run(jobs, "fifo-backfill")
    assert fifo["idle_while_waiting_pct"] == pytest.approx(2475 / 200, abs=0.01)
    assert backfill["idle_while_waiting_pct"] == pytest.approx(1225 / 200, abs=0.01)
    assert fifo["utilisation"] == pytest.approx((100 * 75 + 10 * 100 + 50 * 25) / 200, abs=0.01)
    assert fifo["work_after_window_pct"] == backfill["work_after_window_pct"] == pytest.approx(125.0)


def test_a_gang_never_runs_part_of_its_tasks() -> None:
    jobs = [sim_job("a", 0, 100), sim_job("gang", 1, 10, GPU, replicas=4), sim_job("c", 2, 10)]
    row = _run(jobs, "tessera")
    assert row["unfinished"] == 0
    # The gang needs all 4 GPUs: it starts once a has ended at 100, not before.
    assert row["gang_wait_p95_s"] is not None and row["gang_wait_p95_s"] >= 98  # type: ignore[operator]


def test_best_effort_work_is_not_thrown_away_for_a_job_whose_room_frees_soon() -> None:
    """Weighed evictions on the timeline: four best-effort 1-GPU jobs that cannot checkpoint
    fill the node; one ends at 3,700 s.  A high-priority job arriving at 3,000 s waits 700 s
    for it rather than kill 3,000 GPU-seconds of another's work; with weighing off it evicts,
    and the victim starts over."""
    from dataclasses import replace

    be = [replace(sim_job(f"be{i}", 0, 36_000.0 if i else 3_700.0), priority=-100) for i in range(4)]
    jobs = [*be, replace(sim_job("high", 3_000.0, 100.0), priority=100)]
    nodes = (NodeSpec("n0", 64_000, 65_536, 4, "V100"),)
    w = Workload("t", nodes, tuple(jobs), QueueTree([QueueSpec("q")]))
    config = timeline_config("tessera", build_profile("tessera", TypicalWorkload.from_tasks([GPU])))
    weighed = run_timeline(w, "tessera", config, 1)
    unweighed = run_timeline(w, "tessera", replace(config, weigh_loss=False), 1)

    def high(r: TimelineResult) -> float:
        return next(j.first_start for j in r.jobs if j.spec.id == "high")

    assert weighed.preemptions == 0 and high(weighed) == 3_700.0
    assert sum(r.lost_gpu_s for r in weighed.jobs) == 0.0
    assert unweighed.preemptions == 1 and high(unweighed) == 3_000.0
    assert sum(r.lost_gpu_s for r in unweighed.jobs) == 3_000.0
    # The victim (the one due to end at 3,700 s) ran again from the start: 2,400 s more of JCT
    # in all, for the 700 s the high-priority job saved.
    jct = [sum(j.finished - j.spec.submit for j in r.jobs) for r in (weighed, unweighed)]
    assert jct[1] - jct[0] == 2_400.0


def test_consolidation_moves_long_small_jobs_so_a_gang_starts_on_whole_nodes() -> None:
    """Three 4-GPU nodes, each filled with a 3-GPU job until 1,000 s; two long 1-GPU jobs take
    the last GPU of two of them and run for 100,000 s.  At 2,000 s a gang of 2 x 4 GPUs needs
    two whole nodes and finds one.  Without consolidation it waits for a long job to end; with
    it, one long job moves (one restart) beside the other, and the gang starts after the move's
    grace."""
    from dataclasses import replace

    nodes = tuple(NodeSpec(f"n{i}", 64_000, 65_536, 4, "V100") for i in range(3))
    three, four = TaskShape(3000, 3072, 3, 1000), TaskShape(4000, 4096, 4, 1000)
    fill = [replace(sim_job(f"fill{i}", 0, 1_000.0, three), checkpointable=True) for i in range(3)]
    long = [replace(sim_job(f"long{i}", 1, 100_000.0), checkpointable=True) for i in range(2)]
    gang = replace(sim_job("gang", 2_000.0, 500.0, four, replicas=2), checkpointable=True)
    jobs = [*fill, *long, gang]
    w = Workload("t", nodes, tuple(jobs), QueueTree([QueueSpec("q")]))
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in jobs))
    config = timeline_config("tessera", profile)

    def start(r: TimelineResult, job: str) -> float:
        return next(j.first_start for j in r.jobs if j.spec.id == job)

    still = run_timeline(w, "tessera", replace(config, consolidate=False), 1)
    moved = run_timeline(w, "tessera", config, 1)
    assert still.preemptions == 0 and start(still, "gang") >= 100_000.0  # waits for a long job
    assert moved.preemptions == 1
    # The move is decided when the gang arrives, and needs the mover to have run 10 minutes.
    assert 2_000.0 < start(moved, "gang") <= 2_000.0 + config.grace_s + 1.0
    assert all(j.finished > 0 for j in moved.jobs)  # the moved job ran to its end elsewhere
    assert sum(j.lost_gpu_s for j in moved.jobs) == config.restart_overhead_s  # one restart, 1 GPU


def test_each_queue_share_is_reported_and_a_queue_deserving_less_than_a_job_is_told_apart() -> None:
    """Two equal queues share five GPUs with a third that deserves 1/20 of one, so whenever the
    third's one job runs its share is 20x what it deserves, whatever the policy; the index over
    the queues that can hold a job shows the fairness the first two get."""
    nodes = (NodeSpec("n0", 64_000, 65_536, 5, "V100"),)
    tree = QueueTree([QueueSpec("a"), QueueSpec("b"), QueueSpec("tiny", weight=0.02)])
    jobs = [SimJob(f"{q}-{i}", q, q, GPU, 1, 0.0, 36_000.0) for q in ("a", "b") for i in range(4)]
    jobs.append(SimJob("tiny-0", "tiny", "tiny", GPU, 1, 0.0, 36_000.0))
    w = Workload("t", nodes, tuple(jobs), tree)
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in jobs))
    summary = summarise(run_timeline(w, "drf", timeline_config("drf", profile), 1))
    share, sub_job = summary["queue_share"], summary["queue_sub_job_pct"]
    assert isinstance(share, dict) and isinstance(sub_job, dict)
    assert sub_job == {"a": 0.0, "b": 0.0, "tiny": 100.0}
    assert share["tiny"] is not None and share["tiny"] > 10  # one GPU held, 1/20 of one deserved
    assert share["a"] == share["b"]  # drf: a and b hold the same while both wait
    jain, whole = summary["jain"], summary["jain_whole_jobs"]
    assert isinstance(jain, float) and isinstance(whole, float)
    assert jain < 0.8 and whole > 0.99  # the tiny queue pulls the index down while its job runs


def test_the_queue_figure_is_drawn_only_where_there_are_queues_to_compare(tmp_path: Path) -> None:
    row = {"queue_share": {"a": 0.9, "b": 42.0}, "queue_under_pct": {"a": 30.0, "b": 5.0}}
    two = {"trace": "t", "policies": {"fifo": row, "tessera": row}}
    assert plot_queue_shares(two, tmp_path / "queues.png") and (tmp_path / "queues.png").stat().st_size > 0
    one = {"trace": "t", "policies": {"fifo": {"queue_share": {"a": 1.0}, "queue_under_pct": {"a": 0.0}}}}
    assert not plot_queue_shares(one, tmp_path / "one.png") and not (tmp_path / "one.png").exists()
