"""What a placement worker counts, kept once and reported twice: to Prometheus (``/metrics``) and
to the per-worker JSON file the load tests and the demo read (``placement-NAME.json``).

Every event goes through one method here, so the two reports cannot drift apart: a count added to
one and forgotten in the other was the risk when each call site updated both."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

from shared import metrics
from shared.core.framework import Status
from shared.eventstore.port import NewEvent
from shared.state.queue_usage import QueueUsage

STAGES = ("plan", "append", "catch_up")
"""Where a cycle's time goes: planning (``run_cycle``), appending its events, catching up after."""
WAITING_SHOWN = 1000
"""The jobs whose reason the JSON file lists, at most (the first in the cycle's order, those
next in line); the counts by kind cover all of them."""
RESERVED = "Reserved"
QUEUE_GPU_KINDS = ("guarantee", "max", "deserved", "used", "borrowed")
"""The ``kind`` label of ``tessera_queue_gpus``, in the order of ``QueueUsage.gpus``."""
QUEUE_JOB_STATES = ("pending", "running")


def kind(status: Status) -> str:
    """The short name of why a job waits: the plugin or rule that stopped it."""
    return status.plugin or "Unschedulable"


def soon(seconds: float) -> str:
    """A wait as an operator reads it: ``~40 s``, ``~12 min``, ``~23.5 h``."""
    if seconds >= 3600:
        return f"~{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds:.0f} s"


def sentence(status: Status) -> str:
    """Why a job waits, as ``tessera status`` shows it: ``Kind: what``."""
    name = kind(status)
    text = status.reason or name
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


@dataclass
class PlacementStats:
    placements: int = 0
    conflicts: int = 0
    cycles: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    _waiting: Mapping[str, Status] = field(default_factory=dict)
    _reserved: Mapping[str, str] = field(default_factory=dict)
    _preempt_at: Mapping[str, float] = field(default_factory=dict)
    _kinds_shown: set[str] = field(default_factory=set)
    _queues_shown: set[str] = field(default_factory=set)

    def cycle(self, plan_s: float, pending: int) -> None:
        """A cycle was planned in ``plan_s``; ``pending`` jobs wait in the worker's view."""
        self.cycles += 1
        self.seconds["plan"] += plan_s
        metrics.PLACEMENT_CYCLES.inc()
        metrics.PLACEMENT_CYCLE_SECONDS.observe(plan_s)
        metrics.PENDING_JOBS.set(pending)

    def waiting(
        self,
        jobs: Mapping[str, Status],
        reserved: Mapping[str, str],
        preempt_at: Mapping[str, float] | None = None,
    ) -> None:
        """What the last cycle left waiting (replacing what the one before left), each job with
        its status; ``reserved``: the holders' sentences; ``preempt_at``: when a job's queue's
        preempt-after lets it preempt.  Kept as handed: a cycle may leave ten thousand jobs, so
        the sentences and counts are made only when reported (once a second)."""
        self._waiting, self._reserved, self._preempt_at = jobs, reserved, preempt_at or {}

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def _waiting_report(self) -> tuple[dict[str, str], dict[str, int]]:
        """Why the first ``WAITING_SHOWN`` waiting jobs wait, and how many wait for each kind
        (set on ``tessera_waiting_jobs`` too)."""
        sentences: dict[int, str] = {}
        why = {}
        for job, status in islice(self._waiting.items(), WAITING_SHOWN):
            said = self._reserved.get(job)
            if said is None:
                said = sentences.get(id(status))
                if said is None:
                    said = sentences[id(status)] = sentence(status)
            at = self._preempt_at.get(job)
            if at is not None:
                left = soon(max(0.0, at - time.time()))
                said += f"; may preempt lower-priority work in {left} (its queue's preempt-after)"
            why[job] = said
        kinds = Counter(kind(s) for s in self._waiting.values())
        if self._reserved:
            for job in self._reserved:
                kinds[kind(self._waiting[job])] -= 1
            kinds[RESERVED] += len(self._reserved)
        counts = {k: n for k, n in kinds.items() if n > 0}
        for gone in self._kinds_shown - counts.keys():
            metrics.WAITING_JOBS.labels(gone).set(0)
        for k, n in counts.items():
            metrics.WAITING_JOBS.labels(k).set(n)
        self._kinds_shown = set(counts)
        return why, counts

    def queues(self, usage: Iterable[QueueUsage]) -> None:
        """Each queue's GPUs and jobs as Prometheus gauges (Kueue's and Volcano's queue metrics);
        the series of a queue no longer in the tree are removed."""
        shown = set()
        for q in usage:
            shown.add(q.name)
            for kind_, value in zip(QUEUE_GPU_KINDS, q.gpus, strict=True):
                metrics.QUEUE_GPUS.labels(q.name, kind_).set(value)
            for state, count in zip(QUEUE_JOB_STATES, (q.pending, q.running), strict=True):
                metrics.QUEUE_JOBS.labels(q.name, state).set(count)
        for gone in self._queues_shown - shown:
            for kind_ in QUEUE_GPU_KINDS:
                metrics.QUEUE_GPUS.remove(gone, kind_)
            for state in QUEUE_JOB_STATES:
                metrics.QUEUE_JOBS.remove(gone, state)
        self._queues_shown = shown

    def conflict(self) -> None:
        """An append lost a race with another writer (its chunk is planned again)."""
        self.conflicts += 1
        metrics.PLACEMENT_CONFLICTS.inc()

    def placed(self, waits_s: Iterable[float], events: Iterable[NewEvent]) -> None:
        """A chunk was written: its jobs, each with how long it waited since admission."""
        n = 0
        for waited in waits_s:
            self.latencies_ms.append(1000 * waited)
            metrics.PLACEMENT_LATENCY_SECONDS.observe(waited)
            n += 1
        self.placements += n
        metrics.PLACEMENTS.inc(n)
        for event in events:
            if event.stream.startswith("job-"):  # once per event, not per stream it goes to
                metrics.PLACEMENT_EVENTS.labels(event.type).inc()

    def spent(self, stage: str, seconds: float) -> None:
        self.seconds[stage] += seconds

    def report(self) -> dict[str, object]:
        """The JSON file's counting part (the worker adds its name and view position)."""
        lat = np.array(self.latencies_ms) if self.latencies_ms else np.zeros(1)
        why, kinds = self._waiting_report()
        return {
            "placements": self.placements,
            "conflicts": self.conflicts,
            "cycles": self.cycles,
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 1),
            "latency_p99_ms": round(float(np.percentile(lat, 99)), 1),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "waiting_kinds": kinds,
            "waiting": why,
        }
