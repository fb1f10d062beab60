"""What a timeline run is judged by: job completion, queueing delay by job size, utilisation,
fairness between queues, and what preemption cost.

* **JCT**: end minus submission, averaged over jobs.
* **Queueing delay**: all the time a job spent pending, every attempt included (a preempted job
  waits again), by size class of GPUs per full run: ``1`` (up to one GPU, shares and CPU-only
  jobs included), ``2-4``, ``8`` (5 to 8) and ``>8``; a class with no job is ``null``.
* **Utilisation**: time-weighted GPU allocation (% of the cluster) over the window in which the
  trace offers its load: from the first arrival (openb: the 10th-percentile arrival, see
  ``busy_window_start``) to the last.
* **Idle while jobs wait**: time-weighted % of the cluster's GPUs left unallocated while at
  least one job was pending, over the same window: room a scheduler could have kept busy (some
  of it only by another order: a waiting 8-GPU gang cannot use three scattered free GPUs).
  Utilisation, this, and the idle share while nothing waits add up to 100.
* **Work after the window**: GPU-time allocated after the last arrival, as % of the window's
  GPU-time.  Work is conserved: where the window starts at the first arrival (Philly),
  utilisation plus this is the trace's work (plus work lost and redone) over the window's
  GPU-time, the same for every policy; a policy that starts long jobs later leaves more of the
  work for after the window and shows a lower utilisation without idling more while jobs wait.
* **Jain's index** over the queues that have demand, of (GPU share received / GPU share
  deserved), where deserved is the tree's water-filling of the cluster over their demands:
  1.0 when every queue gets what it deserves; sampled every half hour and averaged.
* **Per queue** at the same samples: its mean share of what it deserves (``queue_share``), the
  % of samples under ``UNDER`` (0.9) of it (``queue_under_pct``), and the % in which it deserved less than
  its smallest job (``queue_sub_job_pct``: such a queue is at 0 or far above 1 whatever the
  policy); ``jain_whole_jobs`` is the index over the other queues, a diagnostic beside Jain's.
* **Why large jobs wait** (``large_wait_cause_pct``): at the same samples, every waiting job
  of more than 4 GPUs counted under the first cause that applies (``shared/sim/wait_causes.py``:
  it holds a reservation, its queue already has its share, another job's reservation holds the
  room, no room, beyond the cycle's depth, behind a strict order, other), as % of all such
  counts; None when no large job ever waited at a sample.
* **Preemption**: evictions, the most times one job was evicted, and GPU-hours lost (work
  since the last checkpoint, or the restart overhead of a checkpointed job) as % of all
  GPU-hours used.
* **Gang wait**: the p95 queueing delay of multi-task jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from shared.sim.timeline import FloatArray, JobRun, TimelineResult

SIZE_CLASSES = ("1", "2-4", "8", ">8")


def size_class(gpus: float) -> str:
    if gpus <= 1:
        return "1"
    if gpus <= 4:
        return "2-4"
    if gpus <= 8:
        return "8"
    return ">8"


def _pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def _window_mean(
    r: TimelineResult, value: Callable[[FloatArray, npt.NDArray[np.int64]], FloatArray]
) -> float:
    """The time-weighted mean over the window (its start to the last arrival) of ``value``
    (allocation %, pending jobs -> a % per moment), each moment's value held until the next."""
    inside = (r.times >= r.window_start) & (r.times <= r.last_arrival)
    t = r.times[inside]
    if t.size < 2 or t[-1] <= t[0]:
        return 0.0
    held = value(r.alloc[inside], r.queue[inside])[:-1]
    return float((held * np.diff(t)).sum() / (t[-1] - t[0]))


def window_utilisation(r: TimelineResult) -> float:
    """Time-weighted GPU allocation (%) from the window's start to the last arrival."""
    return _window_mean(r, lambda alloc, _: alloc)


def idle_while_waiting(r: TimelineResult) -> float:
    """Time-weighted % of the GPUs unallocated while a job was pending, over the window."""
    return _window_mean(r, lambda alloc, queue: np.where(queue > 0, 100.0 - alloc, 0.0))


def after_window(r: TimelineResult) -> float:
    """GPU-time allocated after the last arrival, as % of the window's GPU-time."""
    span = r.last_arrival - r.window_start
    after = r.times >= r.last_arrival
    t, a = r.times[after], r.alloc[after]
    if span <= 0 or t.size < 2:
        return 0.0
    return float((a[:-1] * np.diff(t)).sum() / span)


def _ratio(part: float, whole: int, scale: float, digits: int) -> float | None:
    return round(scale * part / whole, digits) if whole else None


def summarise(r: TimelineResult) -> dict[str, object]:
    jobs: list[JobRun] = r.jobs
    done = [j for j in jobs if j.finished >= 0]
    by_class: dict[str, list[float]] = {c: [] for c in SIZE_CLASSES}
    for j in jobs:
        by_class[size_class(j.spec.gpus)].append(j.waited)
    util = window_utilisation(r)
    used = sum(j.used_gpu_s for j in jobs)
    lost = sum(j.lost_gpu_s for j in jobs)
    gangs = [j.waited for j in jobs if j.spec.replicas > 1 and j.spec.min_replicas in (0, j.spec.replicas)]
    shares = r.queue_shares.items()
    causes = sum(r.large_wait_causes.values())
    return {
        "avg_jct_s": round(float(np.mean([j.finished - j.spec.submit for j in done])), 1) if done else None,
        "wait_p50_s": {c: _pct(v, 50) for c, v in by_class.items()},
        "wait_p95_s": {c: _pct(v, 95) for c, v in by_class.items()},
        "wait_p99_s": {c: _pct(v, 99) for c, v in by_class.items()},
        "jain": round(float(r.jain.mean()), 4) if r.jain.size else 1.0,
        "jain_whole_jobs": round(float(r.jain_whole_jobs.mean()), 4) if r.jain_whole_jobs.size else None,
        "queue_share": {q: _ratio(s.total, s.samples, 1.0, 3) for q, s in shares},
        "queue_under_pct": {q: _ratio(s.below, s.samples, 100.0, 1) for q, s in shares},
        "queue_sub_job_pct": {q: _ratio(s.sub_job, s.samples, 100.0, 1) for q, s in shares},
        "large_wait_cause_pct": {c: _ratio(n, causes, 100.0, 1) for c, n in r.large_wait_causes.items()},
        "utilisation": round(util, 2),
        "idle_while_waiting_pct": round(idle_while_waiting(r), 2),
        "work_after_window_pct": round(after_window(r), 2),
        "preemptions": int(sum(j.preemptions for j in jobs)),
        "max_preemptions_per_job": int(max((j.preemptions for j in jobs), default=0)),
        "gpu_hours_lost_pct": round(100.0 * lost / used, 3) if used else 0.0,
        "gang_wait_p95_s": _pct(gangs, 95),
        "jobs": len(jobs),
        "unfinished": len(jobs) - len(done),
        "cycles": r.cycles,
        "wall_s": round(r.wall_s, 2),
        "jobs_per_s": round(len(jobs) / r.wall_s) if r.wall_s > 0 else None,
    }


def median_summary(runs: Sequence[dict[str, object]]) -> dict[str, object]:
    """Per figure, the median over seeds (per size class for the wait figures; None stays None)."""

    def med(values: list[object]) -> object:
        given = [v for v in values if isinstance(v, int | float)]
        if not given:
            return None
        m = float(np.median([float(v) for v in given]))
        return round(m, 4) if isinstance(given[0], float) else round(m)

    out: dict[str, object] = {}
    for key, first in runs[0].items():
        if isinstance(first, dict):
            out[key] = {c: med([run[key][c] for run in runs]) for c in first}  # type: ignore[index]
        else:
            out[key] = med([run[key] for run in runs])
    return out
