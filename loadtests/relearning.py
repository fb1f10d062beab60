"""How a live worker's learnt workload changes placement: the same pods, one at a time, with the
typical workload learnt as the worker learns it.

    .venv/bin/python loadtests/relearning.py --policy tessera --seeds 42-46

A placement worker is not clairvoyant, as the simulator is: it learns its typical workload from
the jobs it has seen (``shared/core/workload_watch.py``, ``Relearning``).  This replays the openb
pods through the cycle's allocate stage, one at a time (nothing leaves, as in
``bench_pipeline.py``), under three schedules:

* ``clairvoyant``: the whole pod list is known from the start (the simulator's and the fill
  protocol's assumption);
* ``fourfold``: relearnt when the jobs seen grow fourfold (the worker before the reach watch);
* ``reach``: also relearnt when a job needs nodes that no learnt shape needs (the worker now).

Orders: ``arrival`` (the pod list by creation time, as ``bench_pipeline.py`` submits it) and the
fill protocol's shuffled order for each seed (``shared/sim/fill.py``: the same node order and pods).
Per run: rebuilds, pods that failed, *narrow* pods that failed (those that fit, empty, on at most
5% of the nodes: openb's 8-GPU pods of more than 96 cores fit only the 39 nodes with 128 cores),
and the GPU allocated when the arrived GPU requests reach 90, 95 and 100% of the cluster.

Prints a table and ends with one JSON line of the figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.cli.simulate import parse_seeds
from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig, Snapshot, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.jobs import Job
from shared.core.queues import open_tree
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from shared.core.workload_watch import NodeKinds, Relearning
from shared.sim.fill import fill_config, fill_order
from shared.sim.trace import TracePod, load_nodes, load_pods

TRACES = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023"
DEFAULT_PODS, DEFAULT_NODES = "openb_pod_list_default.csv", "openb_node_list_all_node.csv"
SCHEDULES = ("clairvoyant", "fourfold", "reach")
MARKS = (90, 95, 100)
NARROW = 0.05  # a pod is narrow when it fits, empty, on at most this share of the nodes


def _config(policy: str, shapes: list[TaskShape]) -> CycleConfig:
    return fill_config(build_profile(policy, TypicalWorkload.from_tasks(shapes)))


def replay(
    policy: str, schedule: str, cluster: ClusterState, pods: list[TracePod], narrow_share: float = NARROW
) -> dict[str, object]:
    """Place ``pods`` in order on ``cluster`` (changed in place) with the workload ``schedule``
    learns; the figures of one run (narrow pods: those that fit, empty, on at most
    ``narrow_share`` of the nodes)."""
    kinds = NodeKinds(cluster)
    reach = {p.shape: kinds.reach(p.shape) for p in pods}
    holders = {r: int(np.frombuffer(r, dtype=np.uint8) @ kinds.count) for r in set(reach.values())}
    narrow = {r for r, n in holders.items() if n <= narrow_share * cluster.size}
    relearning = Relearning(watch_reach=schedule == "reach")
    config = _config(policy, [p.shape for p in pods]) if schedule == "clairvoyant" else None
    queues = open_tree(["default"])
    rng = np.random.default_rng(1)
    total = cluster.total_gpu_milli
    seen: list[TaskShape] = []
    arrived = rebuilds = failed = narrow_failed = narrow_pods = 0
    at: dict[int, float] = {}
    for pod in pods:
        seen.append(pod.shape)
        due = config is None or relearning.due(cluster.names, len(seen), [pod.shape]) is not None
        if schedule != "clairvoyant" and due:
            config = _config(policy, seen)
            relearning.learnt(cluster, len(seen), seen)
            rebuilds += 1
        assert config is not None
        job = Job(id=pod.name, queue="default", tenant="", shape=pod.shape)
        placed = run_cycle(Snapshot(cluster, [job], queues=queues), config, 0.0, rng).placed.get(job.id)
        for p in placed or []:
            cluster.place(p.node, p.task, p.gpus)
        is_narrow = reach[pod.shape] in narrow
        narrow_pods += is_narrow
        if not placed:
            failed += 1
            narrow_failed += is_narrow
        arrived += pod.shape.total_gpu_milli
        for mark in MARKS:
            if mark not in at and arrived >= mark * total / 100:
                at[mark] = round(100 * cluster.used_gpu_milli() / total, 2)
    return {
        "rebuilds": rebuilds,
        "failed": failed,
        "narrow_pods": narrow_pods,
        "narrow_failed": narrow_failed,
        **{f"alloc_at_{m}": at.get(m) for m in MARKS},
        "alloc_end": round(100 * cluster.used_gpu_milli() / total, 2),
    }


def main(
    policy: Annotated[str, typer.Option(help="placement policy")] = "tessera",
    seeds: Annotated[str, typer.Option(help="fill orders, e.g. 42-46 (besides the arrival order)")] = "42-46",
    pods_csv: Annotated[Path, typer.Option("--pods", help="pod list")] = TRACES / DEFAULT_PODS,
    nodes_csv: Annotated[Path, typer.Option("--nodes", help="node list")] = TRACES / DEFAULT_NODES,
) -> None:
    """Replay the pods under each learning schedule; print a table and one JSON line."""
    nodes = load_nodes(nodes_csv)
    pods = load_pods(pods_csv)
    total = sum(n.gpu_count for n in nodes) * 1000
    orders: dict[str, tuple[list[TracePod], list[int]]] = {
        "arrival": (sorted(pods, key=lambda p: (p.creation_time, p.name)), list(range(len(nodes))))
    }
    for seed in parse_seeds(seeds):
        node_order = [int(i) for i in np.random.default_rng([seed, 1]).permutation(len(nodes))]
        orders[f"seed {seed}"] = (fill_order(pods, total, seed, 1.3), node_order)
    runs: dict[str, dict[str, dict[str, object]]] = {}
    with Progress(transient=True) as progress:
        bar = progress.add_task("replaying", total=len(orders) * len(SCHEDULES))
        for name, (order, node_order) in orders.items():
            for schedule in SCHEDULES:
                cluster = ClusterState([nodes[i] for i in node_order])
                runs.setdefault(name, {})[schedule] = replay(policy, schedule, cluster, order)
                progress.advance(bar)
    table = Table(title=f"{policy}: the workload learnt as a live worker learns it")
    for column in ("order", "schedule", "rebuilds", "failed", "narrow failed", "@90", "@95", "@100", "end"):
        table.add_column(column, justify="right")
    for name, by_schedule in runs.items():
        for schedule, r in by_schedule.items():
            table.add_row(
                name,
                schedule,
                str(r["rebuilds"]),
                str(r["failed"]),
                f"{r['narrow_failed']}/{r['narrow_pods']}",
                *(str(r[f"alloc_at_{m}"]) for m in MARKS),
                str(r["alloc_end"]),
            )
    Console().print(table)
    print(json.dumps({"policy": policy, "runs": runs}))


if __name__ == "__main__":
    typer.run(main)
