"""A placement worker's counts go to its JSON file and to Prometheus through one call each, so the
two reports move together."""

from __future__ import annotations

from prometheus_client import REGISTRY

from services.placement.stats import PlacementStats
from shared.eventstore.port import NewEvent


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_both_reports_count_the_same_cycles_placements_and_conflicts() -> None:
    before = {
        "cycles": _sample("tessera_placement_cycles_total"),
        "placements": _sample("tessera_placements_total"),
        "conflicts": _sample("tessera_placement_conflicts_total"),
        "latency_n": _sample("tessera_placement_latency_seconds_count"),
        "placed_events": _sample("tessera_placement_events_total", {"type": "JobPlaced"}),
    }
    stats = PlacementStats()
    stats.cycle(0.25, pending=7)
    stats.cycle(0.75, pending=3)
    stats.conflict()
    events = [
        NewEvent("job-a", "JobPlaced", {}),
        NewEvent("node-1", "JobPlaced", {}),  # the same placement on the node's stream: not counted twice
        NewEvent("job-b", "JobPlaced", {}),
    ]
    stats.placed(iter([0.010, 0.030]), events)  # a generator, as the worker passes it
    stats.spent("append", 0.5)

    report = stats.report()
    assert report["cycles"] == 2 and report["placements"] == 2 and report["conflicts"] == 1
    assert report["seconds"] == {"plan": 1.0, "append": 0.5, "catch_up": 0.0}
    assert report["latency_p50_ms"] == 20.0
    assert _sample("tessera_placement_cycles_total") - before["cycles"] == 2
    assert _sample("tessera_placements_total") - before["placements"] == 2
    assert _sample("tessera_placement_conflicts_total") - before["conflicts"] == 1
    assert _sample("tessera_placement_latency_seconds_count") - before["latency_n"] == 2
    assert _sample("tessera_placement_events_total", {"type": "JobPlaced"}) - before["placed_events"] == 2
    assert _sample("tessera_pending_jobs") == 3


def test_a_worker_that_placed_nothing_reports_zeros() -> None:
    report = PlacementStats().report()
    assert report["placements"] == 0 and report["latency_p50_ms"] == 0.0 and report["latency_p99_ms"] == 0.0
