"""Tessera's order within a priority class, by the name an operator sets.

One place maps ``TESSERA_ORDER_WITHIN`` (the placement workers) and ``tessera simulate
--order-within`` (the simulator) to an order plugin, so the two run the very same order.
"""

from __future__ import annotations

from typing import Literal

from shared.core.plugins.order.priority_age import PriorityAge, RequeueAt
from shared.core.plugins.order.response_ratio import ResponseRatio

OrderWithin = Literal["age", "response-ratio"]
"""``age``: oldest first (``priority_age``, the default); ``response-ratio``: highest response
ratio next (``response_ratio``)."""


def order_within(name: OrderWithin, requeue_at: RequeueAt = "eviction") -> PriorityAge | ResponseRatio:
    """The order plugin for ``name``; ``requeue_at`` says where an evicted job's wait starts."""
    if name == "age":
        return PriorityAge(requeue_at=requeue_at)
    if name == "response-ratio":
        return ResponseRatio(requeue_at=requeue_at)
    raise ValueError(f"order within a class must be 'age' or 'response-ratio', not {name!r}")
