"""Where an evicted job queues again: behind what came before its eviction (the default), or at
its submission time (Kueue's ``requeuingStrategy.timestamp: Creation``)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.core.cycle import CycleConfig, Snapshot, run_cycle
from shared.core.jobs import RuntimeEstimator
from shared.core.plugins.order.priority_age import PriorityAge
from shared.settings import Settings
from tests.unit.builders import cluster, node, worker_config
from tests.unit.test_cycle import job, profile

# Submitted first, ran, was evicted at 500 s; the other job came at 100 s and never ran.
EVICTED = job("evicted", submitted=0.0, queued_since=500.0, attempt=1, preemptions=1)
NEWER = job("newer", submitted=100.0)


def _first_placed(order: PriorityAge) -> set[str]:
    c = cluster(node("a", gpus=1))  # room for one of the two
    config = CycleConfig(profile(), order=order, reserve=False, preempt=False, reclaim=False)
    result = run_cycle(Snapshot(c, [EVICTED, NEWER]), config, 1000.0, np.random.default_rng(0))
    return set(result.placed)


def test_by_default_an_evicted_job_queues_behind_jobs_that_came_before_its_eviction() -> None:
    assert _first_placed(PriorityAge()) == {"newer"}


def test_with_creation_it_keeps_its_submission_time() -> None:
    assert _first_placed(PriorityAge(requeue_at="creation")) == {"evicted"}


def test_priority_still_comes_first_with_creation() -> None:
    order = PriorityAge(requeue_at="creation")
    high = job("high", submitted=400.0, priority=10)  # ten hours of aging ahead
    est = RuntimeEstimator()
    assert order.key(high, 1000.0, est) < order.key(EVICTED, 1000.0, est)


def test_an_unknown_timestamp_is_refused() -> None:
    with pytest.raises(ValueError, match="requeue_at"):
        PriorityAge(requeue_at="later")  # type: ignore[arg-type]


async def test_the_placement_workers_take_it_from_the_setting() -> None:
    for setting, expected in ((Settings(), "eviction"), (Settings(requeue_timestamp="creation"), "creation")):
        order = (await worker_config(setting)).order
        assert isinstance(order, PriorityAge) and order.requeue_at == expected
