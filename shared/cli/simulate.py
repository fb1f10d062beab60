"""``tessera simulate``: replay a trace through the core under several policies and seeds."""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.core.fragmentation import TypicalWorkload
from shared.core.task import NodeSpec
from shared.sim.fill import FillResult, run_fill
from shared.sim.report import SUMMARY_POINTS, write_fill, write_timeline
from shared.sim.timeline import TimelineResult, run_timeline
from shared.sim.trace import TracePod, load_nodes, load_pods


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,43`` or a mix (``1,5-7``) as a sorted list of distinct seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            start, end = int(low), int(high)
            if end < start:
                raise ValueError(f"seed range {part!r} runs backwards")
            seeds.update(range(start, end + 1))
        else:
            seeds.add(int(part))
    if not seeds:
        raise ValueError("no seeds given")
    return sorted(seeds)


@dataclass(frozen=True)
class Job:
    nodes: Path
    pods: Path
    policy: str
    seed: int
    mode: str
    inflation: float
    speedup: float


@cache
def _load(nodes: Path, pods: Path) -> tuple[list[NodeSpec], list[TracePod], TypicalWorkload]:
    node_list = load_nodes(nodes)
    pod_list = load_pods(pods)
    return node_list, pod_list, TypicalWorkload.from_tasks(p.shape for p in pod_list)


def run_job(job: Job) -> FillResult | TimelineResult:
    nodes, pods, workload = _load(job.nodes, job.pods)
    if job.mode == "fill":
        return run_fill(nodes, pods, job.policy, job.seed, job.inflation, workload)
    return run_timeline(nodes, pods, job.policy, job.seed, workload, speedup=job.speedup)


def simulate(
    nodes: Path,
    pods: Path,
    policies: list[str],
    seeds: list[int],
    mode: str,
    out: Path,
    inflation: float,
    speedup: float,
    workers: int,
    console: Console,
) -> dict[str, object]:
    # Fail on a bad trace here, with its line number, before any worker starts.
    _load(nodes, pods)
    jobs = [Job(nodes, pods, p, s, mode, inflation, speedup) for p in policies for s in seeds]
    workers = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
    results: list[FillResult | TimelineResult] = []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{mode} runs ({workers} worker(s))", total=len(jobs))
        if workers == 1:
            for job in jobs:
                results.append(run_job(job))
                progress.advance(task)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures: list[Future[FillResult | TimelineResult]] = [pool.submit(run_job, j) for j in jobs]
                for future in futures:
                    results.append(future.result())
                    progress.advance(task)
    trace = pods.stem
    if mode == "fill":
        fill = [r for r in results if isinstance(r, FillResult)]
        summary = write_fill(fill, out, trace, nodes.stem)
        _print_fill(summary, console)
    else:
        timeline = [r for r in results if isinstance(r, TimelineResult)]
        summary = write_timeline(timeline, out, trace, nodes.stem)
        _print_timeline(summary, console)
    console.print(f"wrote {out / 'summary.json'}, {out / 'curves.csv'} and figures")
    return summary


def _print_fill(summary: dict[str, object], console: Console) -> None:
    table = Table(title=f"GPU allocation % (median over seeds) — {summary['trace']}")
    table.add_column("policy")
    for x in SUMMARY_POINTS:
        table.add_column(f"@{x}%", justify="right")
    table.add_column("frag @80%", justify="right")
    policies = summary["policies"]
    assert isinstance(policies, dict)
    for name, row in policies.items():
        alloc = row["alloc"]
        table.add_row(name, *[f"{alloc[str(x)]:.2f}" for x in SUMMARY_POINTS], f"{row['frag_amount_80']:.2f}")
    console.print(table)


def _print_timeline(summary: dict[str, object], console: Console) -> None:
    policies = summary["policies"]
    assert isinstance(policies, dict)
    table = Table(title=f"timeline replay (median over seeds) — {summary['trace']}")
    keys = list(next(iter(policies.values())).keys())
    table.add_column("policy")
    for key in keys:
        table.add_column(key, justify="right")
    for name, row in policies.items():
        table.add_row(name, *[str(row[k]) for k in keys])
    console.print(table)
