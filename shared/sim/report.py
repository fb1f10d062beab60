"""Writes a simulation's results: ``summary.json``, ``curves.csv`` and the figures."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from shared.sim.fill import ARRIVED_POINTS, FillResult
from shared.sim.timeline import TimelineResult

SUMMARY_POINTS = (90, 95, 100, 130)
R = TypeVar("R", FillResult, TimelineResult)


def by_policy(results: Sequence[R]) -> dict[str, list[R]]:
    """Results grouped by policy, policies in the order they first appear."""
    groups: dict[str, list[R]] = defaultdict(list)
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


def write_fill(results: Sequence[FillResult], out: Path, trace: str, nodes: str) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    summary = fill_summary(results, trace, nodes)
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def timeline_summary(results: Sequence[TimelineResult], trace: str, nodes: str) -> dict[str, object]:
    policies: dict[str, object] = {}
    for policy, runs in by_policy(results).items():
        per_seed = [r.summary() for r in runs]
        policies[policy] = {
            k: round(statistics.median(float(s[k]) for s in per_seed), 3) for k in per_seed[0]
        }
    seeds = sorted({r.seed for r in results})
    return {"policies": policies, "seeds": seeds, "mode": "timeline", "trace": trace, "nodes": nodes}


def write_timeline(results: Sequence[TimelineResult], out: Path, trace: str, nodes: str) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    summary = timeline_summary(results, trace, nodes)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "curves.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", "seed", "time_s", "alloc", "queue"])
        for r in results:
            grid, alloc, queue = _resample(r, 1000)
            for t, a, q in zip(grid, alloc, queue, strict=True):
                writer.writerow([r.policy, r.seed, round(float(t), 1), round(float(a), 3), int(q)])
    _plot_timeline(results, out / "utilisation.png", trace)
    return summary


def _resample(r: TimelineResult, points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step-hold values at ``points`` evenly spaced times over the arrival window."""
    end = max(r.last_arrival, float(r.times[0]) + 1.0)
    grid = np.linspace(float(r.times[0]), end, points)
    idx = np.clip(np.searchsorted(r.times, grid, side="right") - 1, 0, r.times.size - 1)
    return grid, r.alloc[idx], r.queue[idx]


def _plot_timeline(results: Sequence[TimelineResult], path: Path, trace: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), dpi=120, sharex=True)
    seen: set[str] = set()
    for r in results:
        if r.policy in seen:
            continue  # one seed per policy keeps the figure readable
        seen.add(r.policy)
        grid, alloc, queue = _resample(r, 2000)
        hours = (grid - grid[0]) / 3600
        top.plot(hours, alloc, lw=1, label=r.policy)
        bottom.plot(hours, queue, lw=1, label=r.policy)
    top.set_ylabel("GPU allocation (%)")
    bottom.set_ylabel("waiting pods")
    bottom.set_xlabel("hours since first arrival")
    top.set_title(f"{trace}: timeline replay")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
