"""Where the idle GPU goes when the fill protocol's arrived load reaches 100%.

    .venv/bin/python loadtests/idle_at_full.py --policy tessera --seeds 42-44

Replays the fill protocol (``shared/sim/fill.py``: same node order, pod order and cycle) up to
the last pod that keeps the arrived GPU requests within the cluster's GPUs, then reports:

* the idle GPU split into whole idle GPUs and shares left on partly used GPUs, and those shares
  by what the GPU holds (the combination of shared tasks on it);
* the pods that failed, by shape;
* the *lone-810m ceiling*: every 810m pod placed leaves 190m that only the rare pods of 190m or
  less can use, so a placer that places every pod that fits (as this protocol's placers do)
  leaves at least ``810m pods x 190m - the GPU of all pods of 190m or less`` idle, whatever it
  does with the rest.  ``tessera bound`` may leave pods out and is not held to it.

Prints a table per seed and ends with one JSON line of the figures.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.cli.simulate import parse_seeds
from shared.core.cluster import ClusterState
from shared.core.cycle import Snapshot, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.jobs import Job
from shared.core.queues import open_tree
from shared.core.registry import build_profile
from shared.core.task import MILLI
from shared.sim.fill import fill_config, fill_order
from shared.sim.trace import load_nodes, load_pods

TRACES = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023"
LONE = 810  # the share whose remainder (190m) almost nothing can use


def idle_at_full(policy: str, seed: int, pods_csv: Path, nodes_csv: Path) -> dict[str, object]:
    nodes = load_nodes(nodes_csv)
    pods = load_pods(pods_csv)
    cluster = ClusterState([nodes[i] for i in np.random.default_rng([seed, 1]).permutation(len(nodes))])
    typical = TypicalWorkload.from_tasks(p.shape for p in pods)
    config = fill_config(build_profile(policy, typical))
    queues = open_tree(["default"])
    rng = np.random.default_rng([seed, 2])
    total = cluster.total_gpu_milli
    arrived = used = 0
    failed: Counter[str] = Counter()
    shares: dict[tuple[int, int], list[int]] = {}
    small = lone = 0
    for pod in fill_order(pods, total, seed, 1.3):
        s = pod.shape
        if arrived + s.total_gpu_milli > total:
            break
        arrived += s.total_gpu_milli
        if s.num_gpu == 1 and s.gpu_milli == LONE:
            lone += 1
        elif s.num_gpu == 1 and s.gpu_milli <= MILLI - LONE:
            small += s.gpu_milli
        job = Job(id=pod.name, queue="default", tenant="", shape=s)
        placed = run_cycle(Snapshot(cluster, [job], queues=queues), config, 0.0, rng).placed.get(job.id)
        if not placed:
            failed[f"{s.num_gpu}x{s.gpu_milli}m {s.cpu_milli // 1000}c"] += 1
            continue
        used += s.total_gpu_milli
        for p in placed:
            cluster.place(p.node, p.task, p.gpus)
            if p.task.gpu_milli < MILLI:
                for g in p.gpus:
                    shares.setdefault((p.node, g), []).append(p.task.gpu_milli)
    whole = int(
        sum(int((cluster.gpu_free[n, : cluster.gpu_count[n]] == MILLI).sum()) for n in range(cluster.size))
    )
    combos: Counter[tuple[int, ...]] = Counter(tuple(sorted(v, reverse=True)) for v in shares.values())
    by_combo = sorted(
        ((combo, n, n * (MILLI - sum(combo))) for combo, n in combos.items()), key=lambda c: -c[2]
    )
    floor_milli = max(0, lone * (MILLI - LONE) - small)
    return {
        "policy": policy,
        "seed": seed,
        "allocated_pct": round(100.0 * used / total, 2),
        "idle_gpus": round((total - used) / MILLI, 1),
        "idle_whole_gpus": whole,
        "idle_shares_gpus": round((total - used) / MILLI - whole, 1),
        "lone_810m_pods": lone,
        "lone_810m_ceiling_pct": round(100.0 - 100.0 * floor_milli / total, 2),
        "shares_by_combo": [
            {"combo": "+".join(f"{m}m" for m in combo), "gpus": n, "idle_gpus": round(w / MILLI, 1)}
            for combo, n, w in by_combo[:12]
        ],
        "failed": dict(failed.most_common(8)),
    }


def main(
    policy: Annotated[str, typer.Option(help="placement policy (a scorer name)")] = "tessera",
    seeds: Annotated[str, typer.Option(help="seeds, e.g. 42-44 or 42,45")] = "42",
    pods: Annotated[Path, typer.Option(help="pod list CSV")] = TRACES / "openb_pod_list_default.csv",
    nodes: Annotated[Path, typer.Option(help="node list CSV")] = TRACES / "openb_node_list_gpu_node.csv",
) -> None:
    console = Console()
    rows = [idle_at_full(policy, seed, pods, nodes) for seed in parse_seeds(seeds)]
    for r in rows:
        table = Table(title=f"{policy}, seed {r['seed']}: allocated {r['allocated_pct']}% at arrived 100%")
        table.add_column("GPU holds")
        table.add_column("GPUs", justify="right")
        table.add_column("idle GPUs", justify="right")
        for c in r["shares_by_combo"]:  # type: ignore[attr-defined]
            table.add_row(c["combo"], f"{c['gpus']:,}", f"{c['idle_gpus']:.1f}")
        table.add_row("(whole idle GPUs)", "", f"{r['idle_whole_gpus']}")
        console.print(table)
        console.print(
            f"idle {r['idle_gpus']} GPUs ({r['idle_whole_gpus']} whole); {r['lone_810m_pods']} pods of "
            f"810m cap any placer that places every pod that fits at {r['lone_810m_ceiling_pct']}%; "
            f"failed: {r['failed']}"
        )
    figures = {
        "policy": policy,
        "seeds": [r["seed"] for r in rows],
        "allocated_pct": [r["allocated_pct"] for r in rows],
        "idle_whole_gpus": [r["idle_whole_gpus"] for r in rows],
        "lone_810m_ceiling_pct": [r["lone_810m_ceiling_pct"] for r in rows],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    typer.run(main)
