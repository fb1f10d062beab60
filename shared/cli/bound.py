"""``tessera bound``: the offline upper bound on GPU allocation at given arrived loads (fill protocol)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.cli.parallel import run_all
from shared.sim.bound import arrived_until, offline_bound
from shared.sim.fill import fill_order
from shared.sim.trace import load_nodes, load_pods


@dataclass(frozen=True)
class BoundJob:
    nodes: Path
    pods: Path
    seed: int
    arrived: int
    inflation: float


def run_bound(job: BoundJob) -> dict[str, float]:
    nodes, pods = load_nodes(job.nodes), load_pods(job.pods)
    total = sum(n.gpu_count for n in nodes) * 1000
    order = fill_order(pods, total, job.seed, job.inflation)
    # Every record the curve averages at ``arrived`` rounds to it, so has arrived at most
    # ``arrived + 0.5`` percent: the bound of that prefix bounds them all.
    prefix = arrived_until([p.shape for p in order], total, job.arrived + 0.5)
    b = offline_bound(nodes, prefix)
    return {
        "seed": job.seed,
        "arrived": job.arrived,
        "bound_pct": round(b.upper_pct, 3),
        "gap_pct": round(b.gap_pct, 4),
        "converged": b.converged,
        "iterations": b.iterations,
    }


def bound(
    nodes: Path,
    pods: Path,
    seeds: list[int],
    arrived: list[int],
    out: Path,
    inflation: float,
    workers: int,
    console: Console,
) -> dict[str, object]:
    load_nodes(nodes), load_pods(pods)  # fail on a bad file here, with its line
    jobs = [BoundJob(nodes, pods, s, a, inflation) for a in arrived for s in seeds]
    results = run_all(run_bound, jobs, workers, console, "bounds")
    summary: dict[str, object] = {
        "trace": pods.stem,
        "nodes": nodes.stem,
        "seeds": seeds,
        "bound": {
            str(a): round(statistics.median(r["bound_pct"] for r in results if r["arrived"] == a), 2)
            for a in arrived
        },
        "runs": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "bound.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = Table(
        title=f"offline upper bound on GPU allocation % — {pods.stem} (median of {len(seeds)} seeds)"
    )
    for a in arrived:
        table.add_column(f"@{a}%", justify="right")
    bounds = summary["bound"]
    assert isinstance(bounds, dict)
    table.add_row(*[f"{bounds[str(a)]:.2f}" for a in arrived])
    console.print(table)
    console.print(f"wrote {out / 'bound.json'}")
    return summary
