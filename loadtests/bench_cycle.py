"""The scheduling cycle's speed on a busy openb cluster, and the timeline simulator's on Philly.

1,523 openb nodes, 20 queues (guarantees summing to 80% of the GPUs), 20,000 running jobs (small
GPU shares and CPU tasks, best effort and normal, across the queues) and 10,000 pending jobs drawn
from the openb trace (its qos as priority classes).  Measured on one core:

* **cycles** as a placement worker runs them (``max_jobs`` 200, no elastic resizing): each
  cycle's placements are taken on the cluster before the next, as the worker's own appends are;
  decisions/s = jobs the cycle decided (placed, or searched and found not to fit) per second;
* **the victim search** for one preemptor: ``preempt_for`` for high-priority 1-GPU jobs on the
  full cluster (the per-cycle index of running tasks is built once and timed apart);
* **the timeline simulator**: the whole Philly trace under ``tessera``, simulated jobs per wall
  second.

Ends with one JSON line: ``decisions_per_s``, ``cycle_p99_ms``, ``preempt_search_p99_ms``,
``timeline_jobs_per_s`` (and the figures behind them).

    .venv/bin/python loadtests/bench_cycle.py [--cycles 30] [--skip-timeline]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from shared.core.actions import allocate, enqueue  # noqa: E402
from shared.core.actions.context import CycleContext  # noqa: E402
from shared.core.actions.preempt import VictimIndex, preempt_for  # noqa: E402
from shared.core.cluster import ClusterState  # noqa: E402
from shared.core.cycle import CycleConfig, Snapshot, run_cycle  # noqa: E402
from shared.core.fragmentation import TypicalWorkload  # noqa: E402
from shared.core.jobs import Job, Running  # noqa: E402
from shared.core.priority import class_of_qos, class_value  # noqa: E402
from shared.core.queues import QueueSpec, QueueTree, vector  # noqa: E402
from shared.core.registry import build_profile  # noqa: E402
from shared.core.task import TaskShape  # noqa: E402
from shared.sim.policies import timeline_config  # noqa: E402
from shared.sim.timeline import run_timeline  # noqa: E402
from shared.sim.trace import load_nodes, load_pods  # noqa: E402
from shared.sim.workload import philly_workload  # noqa: E402

TRACES = Path(__file__).resolve().parent / "traces"
OPENB = TRACES / "alibaba-gpu-v2023"
QUEUES = [f"team-{i:02d}" for i in range(20)]


def busy_cluster(
    rng: np.random.Generator, running: int, shapes: list[TaskShape] | None = None
) -> tuple[ClusterState, list[Running]]:
    """The cluster with ``running`` small jobs placed first-fit (shares of 100-250m, CPU tasks)."""
    cluster = ClusterState(load_nodes(OPENB / "openb_node_list_all_node.csv"))
    out: list[Running] = []
    shapes = shapes or [TaskShape(1000, 2048, 1, m) for m in (100, 200, 250)] + [TaskShape(2000, 4096)]
    for k in range(running):
        shape = shapes[int(rng.integers(len(shapes)))]
        if shape.num_gpu:
            fits = np.flatnonzero(
                (cluster.gpu_free.max(axis=1) >= shape.gpu_milli) & (cluster.cpu_free >= shape.cpu_milli)
            )
        else:
            fits = np.flatnonzero((cluster.gpu_count == 0) & (cluster.cpu_free >= shape.cpu_milli))
            if not fits.size:
                fits = np.flatnonzero(cluster.cpu_free >= shape.cpu_milli)
        if not fits.size:
            break
        node = int(fits[int(rng.integers(min(fits.size, 64)))])  # first-fit among the first few
        gpus: tuple[int, ...] = ()
        if shape.num_gpu:
            row = cluster.gpu_free[node]
            gpus = (int(np.flatnonzero(row >= shape.gpu_milli)[0]),)
        placement = cluster.place(node, shape, gpus)
        priority = class_value("best-effort") if k % 3 else class_value("normal")
        job = Job(
            id=f"run-{k}",
            queue=QUEUES[k % len(QUEUES)],
            tenant="t",
            shape=shape,
            priority=priority,
            checkpointable=k % 2 == 0,
            duration_s=3600.0,
        )
        out.append(Running(job, (placement,), started=-7200.0))
    return cluster, out


def pending_jobs(rng: np.random.Generator, count: int) -> list[Job]:
    pods = load_pods(OPENB / "openb_pod_list_default.csv")
    picks = rng.integers(len(pods), size=count)
    return [
        Job(
            id=f"pend-{k}",
            queue=QUEUES[k % len(QUEUES)],
            tenant="t",
            shape=pods[int(i)].shape,
            priority=class_value(class_of_qos(pods[int(i)].qos)),
            submitted=float(k) / 10,
            duration_s=600.0,
        )
        for k, i in enumerate(picks)
    ]


def queue_tree(cluster: ClusterState) -> QueueTree:
    """20 queues with equal guarantees (80% of the GPUs in all); a job waiting an hour may
    preempt lower-priority work in any queue (``preempt-after``)."""
    share = 0.8 * cluster.total_gpu_milli / len(QUEUES)
    return QueueTree(QueueSpec(q, guarantee=vector(gpu=share), preempt_after_s=3600.0) for q in QUEUES)


def bench_cycles(
    cluster: ClusterState, running: list[Running], pending: list[Job], tree: QueueTree, cycles: int
) -> dict[str, float]:
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in pending))
    config = CycleConfig(profile, elastic=False, max_jobs=200)
    rng = np.random.default_rng(0)
    times, decided, placed_total = [], 0, 0
    waiting = list(pending)
    held = list(running)
    cluster = cluster.copy()
    for c in range(cycles):
        snapshot = Snapshot(cluster, waiting, held, queues=tree)
        t0 = time.perf_counter()
        result = run_cycle(snapshot, config, 10_000.0 + c, rng)
        times.append(time.perf_counter() - t0)
        decided += len(result.placed) + sum(
            1 for s in result.unschedulable.values() if s.plugin not in ("QueueDepth", "CycleBudget")
        )
        placed_total += len(result.placed)
        by_id = {j.id: j for j in waiting}
        for job_id, placements in result.placed.items():
            for p in placements:
                cluster.place(p.node, p.task, p.gpus)
            held.append(Running(by_id[job_id], tuple(placements), 10_000.0 + c))
        waiting = [j for j in waiting if j.id not in result.placed]
    ms = np.array(times) * 1000
    return {
        "cycles": cycles,
        "decisions_per_s": round(decided / sum(times)),
        "placements_per_s": round(placed_total / sum(times)),
        "placements": placed_total,
        "cycle_p50_ms": round(float(np.percentile(ms, 50)), 1),
        "cycle_p99_ms": round(float(np.percentile(ms, 99)), 1),
        "running_after": len(held),
    }


def bench_preemption(
    cluster: ClusterState, running: list[Running], tree: QueueTree, searches: int
) -> dict[str, float]:
    profile = build_profile("tessera", TypicalWorkload.from_tasks([TaskShape(4000, 8192, 1, 1000)]))
    config = CycleConfig(profile, elastic=False)
    preemptors = [
        Job(
            id=f"urgent-{k}",
            queue=QUEUES[k % len(QUEUES)],
            tenant="t",
            shape=TaskShape(4000, 8192, 1, 1000),
            priority=class_value("high"),
            submitted=-7200.0,  # waited past its queue's preempt-after: may evict anywhere
        )
        for k in range(searches)
    ]
    snapshot = Snapshot(cluster, preemptors, running, queues=tree)
    ctx = CycleContext(snapshot, config, 10_000.0, np.random.default_rng(0), tree)
    enqueue.run(ctx)
    allocate.run(ctx)
    t0 = time.perf_counter()
    ctx.victims = VictimIndex(ctx)
    index_ms = 1000 * (time.perf_counter() - t0)
    times, found = [], 0
    for job in ctx.blocked[:searches]:
        t0 = time.perf_counter()
        found += preempt_for(ctx, job)
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1000 if times else np.zeros(1)
    return {
        "preempt_searches": len(times),
        "preempt_found": found,
        "preempt_search_p50_ms": round(float(np.percentile(ms, 50)), 2),
        "preempt_search_p99_ms": round(float(np.percentile(ms, 99)), 2),
        "victim_index_ms": round(index_ms, 1),
    }


def bench_timeline(console: Console) -> dict[str, float]:
    w = philly_workload(
        TRACES / "philly" / "gavel-derived-per-vc-seed0", TRACES / "philly" / "gavel_isolated_throughputs.csv"
    )
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in w.jobs))
    with Progress(console=console) as progress:
        task = progress.add_task("Philly timeline under tessera", total=len(w.jobs))
        r = run_timeline(
            w,
            "tessera",
            timeline_config("tessera", profile),
            42,
            lambda done, n: progress.update(task, completed=done),
        )
    return {
        "timeline_jobs": len(w.jobs),
        "timeline_wall_s": round(r.wall_s, 1),
        "timeline_jobs_per_s": round(len(w.jobs) / r.wall_s),
        "timeline_cycles": r.cycles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--running", type=int, default=20_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--skip-timeline", action="store_true")
    args = parser.parse_args()
    console = Console(width=120)
    rng = np.random.default_rng(7)
    with console.status("building the cluster"):
        cluster, running = busy_cluster(rng, args.running)
        pending = pending_jobs(rng, args.pending)
        tree = queue_tree(cluster)
    alloc = 100 * cluster.used_gpu_milli() / cluster.total_gpu_milli
    console.print(
        f"{cluster.size} nodes, {len(running)} running jobs ({alloc:.1f}% of GPUs), {len(pending)} pending, "
        f"{len(QUEUES)} queues"
    )
    figures: dict[str, float] = {"nodes": cluster.size, "running": len(running), "pending": len(pending)}
    with console.status("cycles"):
        figures |= bench_cycles(cluster, running, pending, tree, args.cycles)
    with console.status("a full cluster for the victim search"):
        # 20,000 jobs again, now filling the GPUs: shares of 300m (three per GPU), then CPU tasks.
        full, held = busy_cluster(np.random.default_rng(8), args.running, [TaskShape(1000, 2048, 1, 300)])
        if len(held) < args.running:
            more, extra = busy_cluster(
                np.random.default_rng(9), args.running - len(held), [TaskShape(1000, 2048)]
            )
            del more
            held += [replace(r, job=replace(r.job, id=f"cpu-{i}")) for i, r in enumerate(extra)]
        full = ClusterState(load_nodes(OPENB / "openb_node_list_all_node.csv"))
        for r in held:
            for p in r.placements:
                full.place(p.node, p.task, p.gpus)
    console.print(
        f"victim search: {len(held)} running jobs, "
        f"{100 * full.used_gpu_milli() / full.total_gpu_milli:.1f}% of GPUs"
    )
    with console.status("victim searches"):
        figures |= bench_preemption(full, held, tree, args.searches)
    if not args.skip_timeline:
        figures |= bench_timeline(console)
    table = Table(title="scheduling cycle (one core)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, f"{value:,}")
    console.print(table)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
