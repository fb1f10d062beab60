"""A held reservation yields to a job of strictly higher priority in its own queue: EASY's slot is
the head's, and within a queue the head is the highest priority."""

from __future__ import annotations

from shared.core.cycle import CycleConfig, Preempt, Release, Reserve, Snapshot
from shared.core.jobs import Reservation
from shared.core.queues import QueueSpec, QueueTree
from tests.unit.builders import cluster, node
from tests.unit.test_cycle import cycle, job, profile, running

NOW = 700.0
BEST_EFFORT, HIGH = -100, 100


def _setup(high_queue: str = "q", high_priority: int = HIGH) -> Snapshot:
    """One GPU: a best-effort job runs on it since 0 s; another best-effort job waits since 5 s
    and holds the reservation of the node; a third job arrives at 700 s."""
    c = cluster(node("n", gpus=1))
    ran = running(c, job("ran", priority=BEST_EFFORT), [(0, (0,))], 0.0)
    holder = job("holder", priority=BEST_EFFORT, submitted=5.0)
    held = Reservation("holder", (0,), since=5.0, expected_start=3600.0, timeout_at=7200.0)
    late = job("late", priority=high_priority, submitted=NOW, queue=high_queue)
    tree = QueueTree([QueueSpec("q"), QueueSpec("other")])
    return Snapshot(c, [holder, late], [ran], queues=tree, reservations={"holder": held})


def test_a_high_priority_job_takes_the_reservation_of_a_lower_one_and_evicts_for_its_room() -> None:
    snap = _setup()
    result = cycle(snap, CycleConfig(profile()), NOW)
    (release,) = result.of(Release)
    assert release.job == "holder" and "higher priority" in release.reason
    assert release.backoff_until == NOW  # it may reserve again at once: it did nothing wrong
    assert "holder" not in result.reservations
    # Its nodes no longer closed to it, the high job evicts the best-effort one running there.
    (evict,) = result.of(Preempt)
    assert evict.victim == "ran" and evict.by == "late"
    assert result.reservations["late"].preemption and result.reservations["late"].nodes == (0,)


def test_without_the_yield_the_high_job_would_wait_behind_the_best_effort_one() -> None:
    """Why the rule exists: the same cluster with the high job of another queue, where the
    reservation does not yield (DRF orders queues), keeps the best-effort job's hold."""
    snap = _setup(high_queue="other")
    result = cycle(snap, CycleConfig(profile()), NOW)
    assert not result.of(Release) and not result.of(Preempt)
    assert set(result.reservations) == {"holder"}


def test_an_equal_priority_job_never_takes_a_reservation() -> None:
    snap = _setup(high_priority=BEST_EFFORT)
    result = cycle(snap, CycleConfig(profile()), NOW)
    assert not result.of(Release)
    assert set(result.reservations) == {"holder"}
    assert not any(isinstance(i, Reserve) and i.reservation.job == "late" for i in result.intents)


def test_plain_easy_keeps_the_hold_when_the_yield_is_off() -> None:
    """fifo-backfill's EASY (a baseline) orders by submission alone: its holder keeps the room."""
    result = cycle(_setup(), CycleConfig(profile(), reservations_yield=False), NOW)
    assert not result.of(Release) and not result.of(Preempt)
    assert set(result.reservations) == {"holder"}


def test_a_higher_job_with_nowhere_to_reserve_leaves_the_hold_alone() -> None:
    """No release for nothing: a yield only happens when the higher job reserves in its place
    (else the holder would release and reserve again every cycle)."""
    snap = _setup()
    wide = job("wide", gpus=2, priority=HIGH, submitted=NOW)  # no node has two GPUs
    snap = Snapshot(snap.cluster, [*snap.pending, wide], snap.running, snap.queues, snap.reservations)
    result = cycle(snap, CycleConfig(profile(), preempt=False), NOW)
    assert "late" in result.reservations  # the one-GPU high job still takes it over
    snap2 = Snapshot(snap.cluster, [snap.pending[0], wide], snap.running, snap.queues, snap.reservations)
    result2 = cycle(snap2, CycleConfig(profile(), preempt=False), NOW)
    assert not result2.of(Release)
    assert set(result2.reservations) == {"holder"}
