"""Writes a simulation's results: ``summary.json``, ``curves.csv`` and the figures."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.sim.fill import ARRIVED_POINTS, FillResult
from shared.sim.metrics import SIZE_CLASSES, median_summary, size_class, summarise
from shared.sim.timeline import UNDER, TimelineResult
from shared.sim.wait_causes import CAUSES
from shared.sim.workload import Workload

SUMMARY_POINTS = (90, 95, 100, 130)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, imported when a figure is drawn: the
    simulator itself never needs it, and it costs a second to import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def by_policy(results: Sequence[FillResult]) -> dict[str, list[FillResult]]:
    """Results grouped by policy, policies in the order they first appear."""
    groups: dict[str, list[FillResult]] = defaultdict(list)
    for r in results:
        groups[r.policy].append(r)
    return groups


def fill_summary(results: Sequence[FillResult], trace: str, nodes: str) -> dict[str, object]:
    """Per policy: median over seeds of allocation % at arrived 90/95/100/130 and frag amount at 80."""
    policies: dict[str, object] = {}
    for policy, runs in by_policy(results).items():
        policies[policy] = {
            "alloc": {
                str(x): round(statistics.median(r.at("alloc", x) for r in runs), 2) for x in SUMMARY_POINTS
            },
            "frag_amount_80": round(statistics.median(r.at("frag_amount", 80) for r in runs), 2),
        }
    seeds = sorted({r.seed for r in results})
    return {"policies": policies, "seeds": seeds, "mode": "fill", "trace": trace, "nodes": nodes}


def write_fill(
    results: Sequence[FillResult],
    out: Path,
    trace: str,
    nodes: str,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``extra``: keys added to ``summary.json`` (what the run was asked, e.g. ``scorer_options``)."""
    out.mkdir(parents=True, exist_ok=True)
    summary = {**fill_summary(results, trace, nodes), **(extra or {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "curves.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", "seed", "arrived", "alloc", "frag_amount", "frag_ratio"])
        for r in results:
            for x in ARRIVED_POINTS:
                writer.writerow([r.policy, r.seed, int(x), r.alloc[x], r.frag_amount[x], r.frag_ratio[x]])
    plot_fill(results, out / "allocation.png", "alloc", "GPU allocation (%)", trace)
    plot_fill(results, out / "fragmentation.png", "frag_amount", "fragmented GPU (% of all GPUs)", trace)
    return summary


def plot_fill(results: Sequence[FillResult], path: Path, series: str, ylabel: str, trace: str) -> None:
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for policy, runs in by_policy(results).items():
        stack = np.vstack([getattr(r, series) for r in runs])
        median = np.median(stack, axis=0)
        line = ax.plot(ARRIVED_POINTS, median, label=policy, lw=2 if policy == "tessera" else 1.4)
        ax.fill_between(
            ARRIVED_POINTS, stack.min(axis=0), stack.max(axis=0), color=line[0].get_color(), alpha=0.15
        )
    if series == "alloc":
        ax.plot(ARRIVED_POINTS, np.minimum(ARRIVED_POINTS, 100), ls=":", color="grey", lw=1, label="ideal")
        ax.set_ylim(70, 100)
        ax.set_xlim(70, 130)
    ax.set_xlabel("arrived GPU workload (% of cluster GPUs)")
    ax.set_ylabel(ylabel)
    seeds = len({r.seed for r in results})
    ax.set_title(f"{trace}: median of {seeds} seed(s), band = min..max")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right" if series == "alloc" else "upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def timeline_record(r: TimelineResult, points: int = 1000) -> dict[str, object]:
    """What a timeline run leaves for the report: its figures, its curves resampled, and every
    job's queueing delay by size class (for the wait CDF)."""
    grid, alloc, queue = _resample(r, points)
    waits: dict[str, list[float]] = {c: [] for c in SIZE_CLASSES}
    for j in r.jobs:
        waits[size_class(j.spec.gpus)].append(round(j.waited, 1))
    return {
        "policy": r.policy,
        "seed": r.seed,
        "summary": summarise(r),
        "grid": grid.tolist(),
        "alloc": alloc.tolist(),
        "queue": queue.tolist(),
        "waits": waits,
        "offered_load": r.offered_load,
    }


def timeline_summary(
    records: Sequence[dict[str, object]], trace: str, workload: Workload
) -> dict[str, object]:
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for rec in records:
        groups[str(rec["policy"])].append(rec)
    policies = {
        p: median_summary([rec["summary"] for rec in runs])  # type: ignore[misc]
        for p, runs in groups.items()
    }
    seeds = sorted({int(rec["seed"]) for rec in records})  # type: ignore[call-overload]
    # Each run's own figures beside the medians: how far the seeds' draws lie apart is part of
    # the result (a gap between two policies smaller than the spread says little).
    per_seed = {
        p: {str(rec["seed"]): rec["summary"] for rec in sorted(runs, key=lambda r: int(r["seed"]))}  # type: ignore[call-overload]
        for p, runs in groups.items()
    }
    return {
        "mode": "timeline",
        "trace": trace,
        "policies": policies,
        "seeds": seeds,
        "per_seed": per_seed,
        "offered_load": round(workload.offered_load(), 3),
        "nodes": len(workload.nodes),
        "gpus": workload.total_gpus,
        "jobs": len(workload.jobs),
        "dropped": workload.dropped,
        "compress": workload.compress,
        "notes": workload.notes,
    }


def write_timeline(
    records: Sequence[dict[str, object]],
    out: Path,
    trace: str,
    workload: Workload,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``extra``: keys added to ``summary.json``, as for :func:`write_fill`."""
    out.mkdir(parents=True, exist_ok=True)
    summary = {**timeline_summary(records, trace, workload), **(extra or {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "curves.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", "seed", "time_s", "alloc", "queue"])
        for rec in records:
            for t, a, q in zip(rec["grid"], rec["alloc"], rec["queue"], strict=True):  # type: ignore[call-overload]
                writer.writerow([rec["policy"], rec["seed"], round(float(t), 1), round(float(a), 3), int(q)])
    _plot_timeline(records, out / "utilisation.png", trace)
    _plot_waits(records, out / "waits.png", trace)
    plot_queue_shares(summary, out / "queues.png")
    plot_wait_causes(summary, out / "large-waits.png")
    return summary


SHARE_SHOWN = 3.0
"""Shares above this many times what a queue deserves are drawn at it, with their value."""


def plot_queue_shares(summary: Mapping[str, object], path: Path) -> bool:
    """Each queue's mean share of what it deserves, per policy (medians over seeds; 1 is fair),
    and how often it held under ``UNDER`` of it.  False (no figure) with fewer than two queues."""
    policies = summary["policies"]
    assert isinstance(policies, dict)
    shares = {p: row.get("queue_share") or {} for p, row in policies.items()}
    queues = sorted({q for by_queue in shares.values() for q, v in by_queue.items() if v is not None})
    if len(queues) < 2:
        return False
    plt = _pyplot()

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, 0.9 * len(queues)), 6), dpi=120, sharex=True)
    width = 0.8 / len(shares)
    for k, (policy, by_queue) in enumerate(shares.items()):
        under = policies[policy].get("queue_under_pct") or {}
        xs = np.arange(len(queues)) + (k - (len(shares) - 1) / 2) * width
        values = [by_queue.get(q) or 0.0 for q in queues]
        bars = top.bar(xs, [min(v, SHARE_SHOWN) for v in values], width, label=policy)
        for bar, v in zip(bars, values, strict=True):
            if v > SHARE_SHOWN:
                at = (bar.get_x() + width / 2, SHARE_SHOWN * 1.02)
                top.annotate(f"{v:.0f}", at, ha="center", va="bottom", fontsize=6, rotation=90)
        bottom.bar(xs, [under.get(q) or 0.0 for q in queues], width, label=policy)
    top.axhline(1.0, color="black", lw=0.8)
    top.set_ylabel("share held / deserved")
    top.set_ylim(0, SHARE_SHOWN * 1.3)
    bottom.set_ylabel(f"% of samples under {UNDER:g}")
    bottom.set_xticks(np.arange(len(queues)), queues, rotation=45, ha="right", fontsize=8)
    top.set_title(f"{summary.get('trace', '')}: each queue's share while it has demand (median of seeds)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3, axis="y")
    handles, labels = top.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=7, ncol=min(6, len(shares)))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_wait_causes(summary: Mapping[str, object], path: Path) -> bool:
    """Why jobs above 4 GPUs waited, per policy: the % of their waiting under each cause
    (``shared/sim/wait_causes.py``; medians over seeds, so a bar may not add up to exactly 100).
    False (no figure) when no large job waited under any policy."""
    policies = summary["policies"]
    assert isinstance(policies, dict)
    split = {p: row.get("large_wait_cause_pct") or {} for p, row in policies.items()}
    split = {p: by_cause for p, by_cause in split.items() if any(v for v in by_cause.values())}
    if not split:
        return False
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(split) + 1.8), dpi=120)
    names = list(split)
    left = np.zeros(len(names))
    for cause in CAUSES:
        values = np.array([split[p].get(cause) or 0.0 for p in names])
        if values.any():
            ax.barh(names, values, left=left, label=cause)
            left += values
    labels = []
    for p in names:
        waits = policies[p].get("wait_p95_s") or {}
        eight = waits.get("8") if isinstance(waits, dict) else None
        labels.append(p if eight is None else f"{p} (8-GPU p95 {eight / 3600:,.0f} h)")
    ax.set_yticks(np.arange(len(names)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("% of the waiting of jobs above 4 GPUs")
    ax.set_xlim(0, 105)
    ax.set_title(f"{summary.get('trace', '')}: why large jobs waited (median of seeds)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(CAUSES), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True


def _resample(r: TimelineResult, points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step-hold values at ``points`` evenly spaced times over the load window."""
    begin = max(float(r.times[0]), r.window_start)
    end = max(r.last_arrival, begin + 1.0)
    grid = np.linspace(begin, end, points)
    idx = np.clip(np.searchsorted(r.times, grid, side="right") - 1, 0, r.times.size - 1)
    return grid, r.alloc[idx], r.queue[idx]


def _first_seed(records: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    seen: set[object] = set()
    out = []
    for rec in records:
        if rec["policy"] not in seen:  # one seed per policy keeps the figure readable
            seen.add(rec["policy"])
            out.append(rec)
    return out


def _plot_timeline(records: Sequence[dict[str, object]], path: Path, trace: str) -> None:
    plt = _pyplot()

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), dpi=120, sharex=True)
    for rec in _first_seed(records):
        grid = np.array(rec["grid"])
        hours = (grid - grid[0]) / 3600
        top.plot(hours, rec["alloc"], lw=1, label=str(rec["policy"]))
        bottom.plot(hours, rec["queue"], lw=1, label=str(rec["policy"]))
    top.set_ylabel("GPU allocation (%)")
    bottom.set_ylabel("waiting jobs")
    bottom.set_xlabel("hours since first arrival")
    top.set_title(f"{trace}: timeline replay (first seed)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_waits(records: Sequence[dict[str, object]], path: Path, trace: str) -> None:
    """CDF of queueing delay per size class, one line per policy."""
    plt = _pyplot()

    fig, axes = plt.subplots(1, len(SIZE_CLASSES), figsize=(12, 3.6), dpi=120, sharey=True)
    for ax, c in zip(axes, SIZE_CLASSES, strict=True):
        for rec in _first_seed(records):
            waits = np.sort(np.array(rec["waits"][c], dtype=np.float64)) / 3600  # type: ignore[index]
            if waits.size:
                ax.step(
                    np.maximum(waits, 1e-3),
                    np.arange(1, waits.size + 1) / waits.size,
                    where="post",
                    lw=1,
                    label=str(rec["policy"]),
                )
        ax.set_xscale("log")
        ax.set_title(f"{c} GPU jobs")
        ax.set_xlabel("queueing delay (h)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of jobs")
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7)
    else:
        axes[0].legend(fontsize=7)
    fig.suptitle(f"{trace}: queueing delay by job size (first seed)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
