"""Highest response ratio next within a priority class (``plugins/order/response_ratio.py``):
short jobs first, long ones aged in by their own length, classes still first."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from shared.core.cycle import CycleConfig, Snapshot, run_cycle
from shared.core.jobs import Job, RuntimeEstimator
from shared.core.plugins.order.priority_age import PriorityAge
from shared.core.plugins.order.response_ratio import ResponseRatio
from shared.core.plugins.order.within import order_within
from shared.settings import Settings
from tests.unit.builders import cluster, node, worker_config
from tests.unit.test_cycle import job, profile


def _placed(jobs: list[Job], now: float, estimator: RuntimeEstimator | None = None) -> set[str]:
    c = cluster(node("a", gpus=1))  # room for one of them
    config = CycleConfig(profile(), order=ResponseRatio(), reserve=False, preempt=False, reclaim=False)
    snapshot = Snapshot(c, jobs, estimator=estimator or RuntimeEstimator())
    return set(run_cycle(snapshot, config, now, np.random.default_rng(0)).placed)


def test_a_short_job_goes_before_a_longer_one_that_came_first() -> None:
    long = job("long", submitted=0.0, duration_s=10_000.0)  # ratio at 100 s: 1.01
    short = job("short", submitted=50.0, duration_s=100.0)  # ratio at 100 s: 1.5
    assert _placed([long, short], now=100.0) == {"short"}


def test_a_long_job_is_aged_in_by_its_own_length() -> None:
    long = job("long", submitted=0.0, duration_s=1_000.0)  # waited 9x its length: ratio 10
    short = job("short", submitted=9_000.0, duration_s=100.0)  # just come: ratio 1
    assert _placed([long, short], now=9_000.0) == {"long"}
    # Earlier, the long job had not waited long enough to pass a short one of the same wait.
    short_early = job("short", submitted=0.0, duration_s=100.0)
    assert _placed([long, short_early], now=500.0) == {"short"}


def test_the_priority_class_comes_first() -> None:
    normal = job("normal", submitted=0.0, duration_s=100.0, priority=0)  # ratio 10
    high = job("high", submitted=900.0, duration_s=10_000.0, priority=100)  # 100 + 1
    assert _placed([normal, high], now=900.0) == {"high"}


def test_without_a_declared_duration_the_learnt_mean_is_used() -> None:
    learnt = RuntimeEstimator()
    learnt.observe(job("done", tenant="fast"), 60.0)  # this tenant's jobs of this shape: a minute
    learnt.observe(job("done", tenant="slow"), 36_000.0)  # and that one's: ten hours
    slow = job("slow", submitted=0.0, tenant="slow")
    fast = job("fast", submitted=30.0, tenant="fast")
    assert _placed([slow, fast], now=60.0, estimator=learnt) == {"fast"}
    assert _placed([slow, fast], now=60.0) == {"slow"}  # nothing learnt: equal lengths, older first


def test_the_order_moves_with_time_so_it_is_not_kept_between_cycles() -> None:
    order = ResponseRatio()
    assert not order.static
    est = RuntimeEstimator()
    long, short = job("long", duration_s=1_000.0), job("short", submitted=1_000.0, duration_s=100.0)
    assert sorted([long, short], key=lambda j: order.key(j, 1_000.0, est))[0].id == "long"  # 2 > 1
    assert sorted([long, short], key=lambda j: order.key(j, 1_200.0, est))[0].id == "short"  # 3 > 2.2


def test_with_creation_an_evicted_job_counts_its_wait_from_its_submission() -> None:
    # Both declare 1,000 s.  At 2,000 s the evicted one has waited 500 s since its eviction
    # (ratio 1.5) but 2,000 s since its submission (ratio 3); the other has waited 1,000 s (2).
    evicted = job(
        "evicted", submitted=0.0, queued_since=1_500.0, attempt=1, preemptions=1, duration_s=1_000.0
    )
    other = job("other", submitted=1_000.0, duration_s=1_000.0)
    c = cluster(node("a", gpus=1))
    for requeue_at, first in (("eviction", "other"), ("creation", "evicted")):
        order = ResponseRatio(requeue_at=requeue_at)  # type: ignore[arg-type]
        config = CycleConfig(profile(), order=order, reserve=False, preempt=False, reclaim=False)
        result = run_cycle(Snapshot(c, [evicted, other]), config, 2_000.0, np.random.default_rng(0))
        assert set(result.placed) == {first}


def test_an_unknown_requeue_timestamp_is_refused() -> None:
    with pytest.raises(ValueError, match="requeue_at"):
        ResponseRatio(requeue_at="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="response-ratio"):
        order_within("shortest")  # type: ignore[arg-type]


async def test_the_placement_workers_take_it_from_the_setting() -> None:
    default = (await worker_config(Settings())).order
    assert isinstance(default, PriorityAge) and default.requeue_at == "eviction"
    chosen = (
        await worker_config(Settings(order_within="response-ratio", requeue_timestamp="creation"))
    ).order
    assert isinstance(chosen, ResponseRatio) and chosen.requeue_at == "creation"


def test_the_setting_names_its_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_ORDER_WITHIN", "shortest-first")
    with pytest.raises(ValidationError, match="response-ratio"):
        Settings()
