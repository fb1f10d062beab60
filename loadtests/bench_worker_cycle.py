"""A placement worker's cycle with a backlog: snapshot from the folded view, cycle, events.

A view is folded from events: ``--nodes`` nodes of 8 GPUs (200), every GPU busy with a 1-GPU job,
and ``--pending`` jobs waiting (10,000: 1, 2, 4 or 8 GPUs, three queues, a quarter of them high
priority), so every cycle searches and places nothing, as a worker does while a backlog waits
for room.  Each cycle one more job is admitted, then ``plan`` runs for it, timed from the view
to the events (``services/placement/handlers.py``), two ways in one run:

* **kept**: the worker's own ``SnapshotBuilder``, kept from cycle to cycle (it follows the view's
  change feed and hands the cycle running and pending deltas);
* **fresh**: a snapshot built from scratch each cycle (every pending job sorted again).

Both must give the same events (checked).  Ends with one JSON line: ``kept_cycle_p50_ms``,
``kept_cycle_p90_ms``, ``fresh_cycle_p50_ms``, ``fresh_cycle_p90_ms``, ``pending``.

    .venv/bin/python loadtests/bench_worker_cycle.py [--nodes 200] [--pending 10000] [--cycles 60]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import time

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from schemas import JobSpec
from schemas.events import JobAdmitted, JobPlaced, JobStarted, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from services.placement.handlers import plan
from shared.core.cycle import CycleConfig
from shared.core.fragmentation import TypicalWorkload
from shared.core.registry import DEFAULT_POLICY, build_profile
from shared.state.snapshot import SnapshotBuilder
from tests.folded_log import Log

QUEUES = ("default", "research", "batch")


def full_cluster(log: Log, nodes: int) -> None:
    for n in range(nodes):
        gpus = [GpuDevice(index=i, model="T4") for i in range(8)]
        inventory = NodeInventory(name=f"n{n}", cpu="96", memory="512Gi", gpus=gpus)
        log.add(f"node-n{n}", NodeRegistered(inventory=inventory))
    for n in range(nodes):
        for g in range(8):
            job = f"r{n}-{g}"
            spec = {
                "id": job,
                "tenant": "t",
                "queue": QUEUES[g % 3],
                "resources": {"cpu": "1", "nvidia.com/gpu": 1},
            }
            log.add(f"job-{job}", JobAdmitted(spec=JobSpec.model_validate(spec)))
            binding = TaskBinding(
                task=0, node=f"n{n}", gpus=[g], gpu_milli=1000, cpu_milli=1000, memory_mib=1024
            )
            log.add(
                f"job-{job}", JobPlaced(job_id=job, bindings=[binding], policy="tessera", node_versions={})
            )
            log.add(f"job-{job}", JobStarted(job_id=job, node=f"n{n}"))


def admit(log: Log, i: int, rng: np.random.Generator) -> str:
    spec = {
        "id": f"p{i}",
        "tenant": "t",
        "queue": QUEUES[i % 3],
        "priority": int(rng.choice([0, 0, 0, 100])),
        "resources": {"cpu": "1", "nvidia.com/gpu": int(rng.choice([1, 2, 4, 8]))},
    }
    log.clock += 1.0
    log.add(f"job-p{i}", JobAdmitted(spec=JobSpec.model_validate(spec)))
    return f"p{i}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=60)
    args = parser.parse_args()
    console = Console(stderr=True)
    rng = np.random.default_rng(0)
    log = Log()
    with console.status("folding the cluster and its backlog"):
        full_cluster(log, args.nodes)
        for i in range(args.pending):
            admit(log, i, rng)
    workload = TypicalWorkload.from_tasks([r.shape for r in log.view.jobs.values()])
    assert workload is not None
    config = CycleConfig(build_profile(DEFAULT_POLICY, workload))
    kept = SnapshotBuilder()
    times: dict[str, list[float]] = {"kept": [], "fresh": []}
    for c in track(range(args.cycles), description="cycles", console=console):
        job = admit(log, args.pending + c, rng)
        outcomes = []
        for way, builder in (("kept", kept), ("fresh", SnapshotBuilder(incremental=False))):
            t0 = time.perf_counter()
            decided = plan(log.view, {job}, config, log.clock, np.random.default_rng(c), builder=builder)
            times[way].append(1000 * (time.perf_counter() - t0))
            outcomes.append(([(e.stream, e.data) for e in decided.events], decided.waiting, decided.reserved))
        if outcomes[0] != outcomes[1]:
            raise SystemExit(f"cycle {c}: the kept builder decided differently from a fresh snapshot")
    warm = {way: t[5:] for way, t in times.items()}  # the first cycles build the kept state
    figures = {
        f"{way}_cycle_p{q}_ms": round(float(np.percentile(t, q)), 2)
        for way, t in warm.items()
        for q in (50, 90)
    }
    table = Table(title=f"a worker's cycle: {args.nodes} full nodes, {args.pending:,} jobs waiting")
    for col in ("snapshot", "p50 ms", "p90 ms"):
        table.add_column(col, justify="left" if col == "snapshot" else "right")
    for way in ("kept", "fresh"):
        table.add_row(way, f"{figures[f'{way}_cycle_p50_ms']:.1f}", f"{figures[f'{way}_cycle_p90_ms']:.1f}")
    Console().print(table)
    print(json.dumps({**figures, "pending": args.pending, "nodes": args.nodes}))


if __name__ == "__main__":
    main()
