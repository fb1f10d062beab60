"""``tessera simulate``: replay a trace through the core under several policies and seeds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.cli.parallel import run_all
from shared.core.fragmentation import TypicalWorkload
from shared.core.plugins.order.priority_age import PriorityAge, RequeueAt
from shared.core.plugins.order.within import OrderWithin, order_within
from shared.core.queues import LargeJobRule
from shared.core.registry import build_profile
from shared.core.task import NodeSpec
from shared.sim.fill import FillResult, run_fill
from shared.sim.metrics import SIZE_CLASSES
from shared.sim.operator import with_large_jobs, with_preempt_after
from shared.sim.policies import timeline_config
from shared.sim.report import SUMMARY_POINTS, timeline_record, write_fill, write_timeline
from shared.sim.runtimes import load_runtimes
from shared.sim.timeline import run_timeline
from shared.sim.trace import TracePod, load_nodes, load_pods
from shared.sim.workload import Workload, openb_workload, philly_workload


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
class Source:
    """Where a timeline workload comes from: an openb pod list, or Philly traces."""

    nodes: Path
    pods: Path
    philly: Path | None = None
    throughputs: Path | None = None
    load: float = 0.9
    compress: float = 0.0  # 0: automatic (see load_workload)
    elastic_fraction: float = 0.0
    jitter_s: float = 0.0  # Philly: each seed delays every arrival by up to this (philly_workload)
    duration_error: float | None = None  # Philly: jobs declare durations with this error (philly_workload)
    runtimes: Path | None = None  # Philly: each job draws its run time from this list (philly_workload)
    large_jobs: LargeJobRule | None = None  # every queue's large-jobs rule (sim/operator.py)
    preempt_after_s: float | None = None  # every queue's preempt-after (sim/operator.py)

    @property
    def name(self) -> str:
        return "philly" if self.philly is not None else self.pods.stem


@dataclass(frozen=True)
class Job:
    source: Source
    policy: str
    seed: int
    mode: str
    inflation: float
    scorer: str = "tessera"
    options: tuple[tuple[str, float | bool], ...] = ()  # the scorer's knobs (``--scorer-options``)
    requeue_at: RequeueAt = "eviction"  # where tessera's evicted jobs queue again (``--requeue-at``)
    order_within: OrderWithin = "age"  # tessera's order within a priority class (``--order-within``)


@cache
def _load(nodes: Path, pods: Path) -> tuple[list[NodeSpec], list[TracePod], TypicalWorkload]:
    node_list = load_nodes(nodes)
    pod_list = load_pods(pods)
    return node_list, pod_list, TypicalWorkload.from_tasks(p.shape for p in pod_list)


def load_workload(source: Source, seed: int = 0) -> Workload:
    """The workload of one run; ``seed`` matters only to Philly with an arrival jitter, declared
    durations or drawn run times (each seed draws its own; an openb run's seed draws its node
    order in the simulator), so only there is each seed's built apart: an openb workload's node
    sample and compression are searched once per process."""
    jittered = source.philly is not None and (
        source.jitter_s > 0 or source.duration_error is not None or source.runtimes is not None
    )
    workload = _workload(source, seed if jittered else 0)
    if source.large_jobs is not None:
        workload = with_large_jobs(workload, source.large_jobs)
    if source.preempt_after_s is not None:
        workload = with_preempt_after(workload, source.preempt_after_s)
    return workload


@cache
def _workload(source: Source, seed: int) -> Workload:
    if source.philly is not None:
        assert source.throughputs is not None
        return philly_workload(
            source.philly,
            source.throughputs,
            source.load,
            source.compress or 1.0,
            source.elastic_fraction,
            jitter_s=source.jitter_s,
            jitter_seed=seed,
            duration_error=source.duration_error,
            runtimes=None if source.runtimes is None else load_runtimes(source.runtimes),
        )
    nodes, raw, _ = _load(source.nodes, source.pods)
    if source.compress > 0:  # as the user asked: every node, arrivals divided by --compress
        pods = [_compressed(p, source.compress) for p in raw]
        return replace(openb_workload(nodes, pods, source.pods.stem), compress=source.compress)
    compress = OPENB_COMPRESS
    whole = openb_workload(nodes, [_compressed(p, compress) for p in raw], source.pods.stem)
    subset = node_sample(nodes, min(1.0, whole.offered_load() / source.load))
    # At least one node of each kind stays, so the sample can be larger than the share:
    # compress a little more until the load is the one asked for (it grows with compression).
    low, high = compress, compress
    while _load_on(subset, raw, high) < source.load and high < 1e6:
        low, high = high, high * 2
    for _ in range(25):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if _load_on(subset, raw, mid) < source.load else (low, mid)
    compress = high
    return replace(
        openb_workload(subset, [_compressed(p, compress) for p in raw], source.pods.stem),
        compress=round(compress, 1),
        notes={"node_share": round(len(subset) / len(nodes), 4), "nodes_of_trace": len(nodes)},
    )


def _load_on(nodes: list[NodeSpec], pods: list[TracePod], factor: float) -> float:
    return openb_workload(nodes, [_compressed(p, factor) for p in pods]).offered_load()


OPENB_COMPRESS = 50.0
"""The openb pod list's 150 days replayed in 3 (run times unchanged) unless --compress says."""


def node_sample(nodes: list[NodeSpec], share: float) -> list[NodeSpec]:
    """About ``share`` of the nodes, the same share of each kind (model, GPUs, CPU, memory),
    at least one of each kind, in the list's order: the cluster scaled down, its mix kept."""
    kinds: dict[tuple[str, int, int, int], list[NodeSpec]] = {}
    for n in nodes:
        kinds.setdefault((n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib), []).append(n)
    keep: set[str] = set()
    for group in kinds.values():
        count = max(1, round(share * len(group)))
        keep.update(n.name for n in group[:count])
    return [n for n in nodes if n.name in keep]


def _compressed(pod: TracePod, factor: float) -> TracePod:
    """The pod arriving ``factor`` times sooner, running as long as before."""
    start = pod.creation_time / factor
    end = None if pod.deletion_time is None else start + (pod.deletion_time - pod.creation_time)
    return replace(pod, creation_time=start, deletion_time=end)


def run_job(job: Job) -> FillResult | dict[str, object]:
    """One simulation; a timeline run returns its summary and curves (small enough to pickle)."""
    if job.mode == "fill":
        nodes, pods, workload = _load(job.source.nodes, job.source.pods)
        return run_fill(nodes, pods, job.policy, job.seed, job.inflation, workload, options=dict(job.options))
    wl = load_workload(job.source, job.seed)
    workload = TypicalWorkload.from_tasks(j.shape for j in wl.jobs)
    profile = build_profile(job.scorer, workload, dict(job.options))
    config = timeline_config(job.policy, profile)
    if isinstance(config.order, PriorityAge):  # tessera's: the placement workers' settings apply
        config = replace(config, order=order_within(job.order_within, job.requeue_at))
    result = run_timeline(wl, job.policy, config, job.seed)
    return timeline_record(result)


def simulate(
    source: Source,
    policies: list[str],
    seeds: list[int],
    mode: str,
    out: Path,
    inflation: float,
    workers: int,
    console: Console,
    scorer: str = "tessera",
    options: Mapping[str, float | bool] | None = None,
    requeue_at: RequeueAt = "eviction",
    order_within: OrderWithin = "age",
) -> dict[str, object]:
    """``options``: the scorer's knobs, for every policy of a fill run or for ``scorer`` in a
    timeline run, checked by the caller (``tessera simulate``, with ``check_options``)."""
    # Fail on a bad trace here, with its line number, before any worker starts.
    if mode == "fill":
        _load(source.nodes, source.pods)
    else:
        load_workload(source, seeds[0])
    knobs = tuple(sorted((options or {}).items()))
    # The folder says which knobs made it (a default run's summary has no such key).
    extra: dict[str, object] = {"scorer_options": dict(knobs)} if knobs else {}
    if requeue_at != "eviction":
        extra["requeue_at"] = requeue_at
    if order_within != "age":
        extra["order_within"] = order_within
    if source.duration_error is not None:
        extra["duration_error"] = source.duration_error
    if source.runtimes is not None:
        extra["runtimes"] = source.runtimes.name
    if source.large_jobs is not None:
        extra["large_class"] = {
            "class": source.large_jobs.priority_class,
            "min_gpus": source.large_jobs.min_gpus,
        }
    if source.preempt_after_s is not None:
        extra["preempt_after_s"] = source.preempt_after_s
    jobs = [
        Job(source, p, s, mode, inflation, scorer, knobs, requeue_at, order_within)
        for p in policies
        for s in seeds
    ]
    results = run_all(run_job, jobs, workers, console, f"{mode} runs")
    if mode == "fill":
        fill = [r for r in results if isinstance(r, FillResult)]
        summary = write_fill(fill, out, source.pods.stem, source.nodes.stem, extra)
        _print_fill(summary, console)
    else:
        records = [r for r in results if isinstance(r, dict)]
        summary = write_timeline(records, out, source.name, load_workload(source, seeds[0]), extra)
        _print_timeline(summary, console)
    if options:
        console.print(f"scorer options: {json.dumps(dict(knobs))}")
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
    """Two tables, each narrow enough for an 80-column terminal: what jobs saw (completion and
    waits by size), then what the cluster did (fairness, use of the GPUs, preemption)."""
    policies = summary["policies"]
    assert isinstance(policies, dict)
    where = f"{summary['trace']}, load {summary['offered_load']}, median over seeds"

    def hours(v: object) -> str:
        return "—" if v is None else f"{float(v) / 3600:.2f}"  # type: ignore[arg-type]

    waits = Table(title=f"jobs: completion and p95 wait (h) by GPUs per job — {where}")
    cluster = Table(title="cluster: fairness, GPUs (% of the window) and preemption")
    width = max(len("policy"), *(len(name) for name in policies))
    for table, columns in (
        (waits, ("avg JCT", *(f"p95 {c}" for c in SIZE_CLASSES))),
        (cluster, ("Jain", "util", "idle while waiting", "after window", "preempt", "max per job", "lost %")),
    ):
        table.add_column("policy", no_wrap=True, min_width=width)  # names whole, headers may wrap
        for c in columns:
            table.add_column(c, justify="right")
    for name, row in policies.items():
        p95 = row["wait_p95_s"]
        waits.add_row(name, hours(row["avg_jct_s"]), *(hours(p95[c]) for c in SIZE_CLASSES))
        cluster.add_row(
            name,
            f"{row['jain']:.3f}",
            f"{row['utilisation']:.1f}",
            f"{row['idle_while_waiting_pct']:.1f}",
            f"{row['work_after_window_pct']:.1f}",
            str(row["preemptions"]),
            str(row["max_preemptions_per_job"]),
            f"{row['gpu_hours_lost_pct']:.2f}",
        )
    console.print(waits)
    console.print(cluster)
