"""The timeline simulator's policies: each one a configuration of the one scheduling cycle.

They differ only in the cycle's stages, never in placement: every policy places with the same
profile (``--scorer``, Tessera's fragmentation-aware scorer by default), so a difference in the
results comes from ordering, fairness, reservations, backfill and preemption alone.

================  ==========================================================================
policy            what it is
================  ==========================================================================
fifo              one order by submission; nothing starts ahead of a job that does not fit
                  (head-of-line blocking), no preemption: the scheduler every cluster starts with
fifo-backfill     EASY backfill (Slurm): the first blocked job reserves where it will start
                  earliest; later jobs run only where they do not delay it (unreserved nodes, or
                  ending before it starts, by the learnt run-time estimate)
drf               queues by weighted dominant share against their deserved share, jobs in a
                  queue by submission; any job that fits starts; no reservations or preemption
                  (Volcano's drf + proportion)
las               Tiresias' discretised 2D least-attained-service (GPU-seconds received; levels
                  split at 1 and 10 GPU-hours, promotion after 8 h waiting), preemptive, no
                  queues; as in the paper, no minimum run time or preemption cap
sjf               shortest (oracle) run time first, any job that fits starts: a reference that
                  knows the future, not a competitor
tessera           DRF queues with guarantees and borrowing, priority classes with aging,
                  EASY reservations and backfill, priority and starvation preemption within the
                  rules and only where it is worth the work lost, reclaim of borrowed capacity,
                  elastic shrink and growth (the default)
================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from shared.core.cycle import CycleConfig
from shared.core.framework import Profile
from shared.core.plugins.order.fifo import Fifo
from shared.core.plugins.order.las import LeastAttained
from shared.core.plugins.order.priority_age import PriorityAge
from shared.core.plugins.order.shortest import ShortestFirst

QUEUE_DEPTH = 256
"""Every policy searches room for at most 256 jobs of its order per cycle (Slurm's
default_queue_depth is 100): the same bound for all, so the comparison is fair, and a cycle's
cost no longer grows with a queue of thousands.  Jobs whose shape already failed in the cycle are
decided without a search and not counted (``CycleConfig.queue_depth``)."""
_OFF = {
    "reserve": False,
    "backfill": False,
    "preempt": False,
    "reclaim": False,
    "elastic": False,
    "consolidate": False,
    "reservations_yield": False,
    "spare_scarce_homes": False,
    "share_preempted_nodes": False,
    "spread_evictions": False,
}

POLICIES: dict[str, Callable[[Profile], CycleConfig]] = {
    "fifo": lambda p: CycleConfig(
        p, order=Fifo(), fair_share=False, strict=True, **_OFF, queue_depth=QUEUE_DEPTH
    ),
    "fifo-backfill": lambda p: CycleConfig(
        p,
        order=Fifo(),
        fair_share=False,
        **{**_OFF, "reserve": True, "backfill": True},
        max_reservations=1,
        reserve_min_gpus=0.0,
        reserve_after_s=0.0,
        reserve_timeout_s=24 * 3600.0,
        queue_depth=QUEUE_DEPTH,
    ),
    "drf": lambda p: CycleConfig(p, order=Fifo(), fair_share=True, **_OFF, queue_depth=QUEUE_DEPTH),
    "las": lambda p: CycleConfig(
        p,
        order=LeastAttained(),
        fair_share=False,
        **_OFF,
        min_runtime_s=0.0,
        max_preemptions=10**9,
        weigh_loss=False,
        queue_depth=QUEUE_DEPTH,
    ),
    "sjf": lambda p: CycleConfig(p, order=ShortestFirst(), fair_share=False, **_OFF, queue_depth=QUEUE_DEPTH),
    "tessera": lambda p: CycleConfig(p, order=PriorityAge(), queue_depth=QUEUE_DEPTH),
}
TIMELINE_POLICIES: tuple[str, ...] = tuple(POLICIES)


def timeline_config(policy: str, profile: Profile) -> CycleConfig:
    try:
        return POLICIES[policy](profile)
    except KeyError:
        raise ValueError(
            f"unknown timeline policy {policy!r}; choose from {', '.join(TIMELINE_POLICIES)}"
        ) from None
