"""What a placement worker counts, kept once and reported twice: to Prometheus (``/metrics``) and
to the per-worker JSON file the load tests and the demo read (``placement-NAME.json``).

Every event goes through one method here, so the two reports cannot drift apart: a count added to
one and forgotten in the other was the risk when each call site updated both."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from shared import metrics
from shared.eventstore.port import NewEvent

STAGES = ("plan", "append", "catch_up")
"""Where a cycle's time goes: planning (``run_cycle``), appending its events, catching up after."""


@dataclass
class PlacementStats:
    placements: int = 0
    conflicts: int = 0
    cycles: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    def cycle(self, plan_s: float, pending: int) -> None:
        """A cycle was planned in ``plan_s``; ``pending`` jobs wait in the worker's view."""
        self.cycles += 1
        self.seconds["plan"] += plan_s
        metrics.PLACEMENT_CYCLES.inc()
        metrics.PLACEMENT_CYCLE_SECONDS.observe(plan_s)
        metrics.PENDING_JOBS.set(pending)

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
        return {
            "placements": self.placements,
            "conflicts": self.conflicts,
            "cycles": self.cycles,
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 1),
            "latency_p99_ms": round(float(np.percentile(lat, 99)), 1),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }
