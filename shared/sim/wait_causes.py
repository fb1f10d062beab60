"""Why a large job is waiting, at one moment: the split behind the p95 wait of large jobs.

Issue 11 asks that jobs of 8 GPUs or more wait at least 6x less than under ``fifo``.  Whether a
policy can get there depends on what holds them, so the timeline counts, at each fairness
sample, every waiting job of more than 4 GPUs (the ``8`` and ``>8`` size classes) under one
cause, the first that applies:

* ``holds-room``: it holds a reservation, and waits for its nodes to drain;
* ``share``: its queue already holds at least the share it deserves (fair share rations it);
* ``reserved``: room would fit it, but another job's reservation holds that room;
* ``no-room``: no node it may use has room (the placement filters said no);
* ``depth``: the cycle did not look that far down the order (or spent its budget);
* ``order``: a strict order stopped at an earlier job (``fifo``);
* ``other``: anything else (a gang backing off after a timeout, a queue at its max).

These are the cycle's own reasons (``CycleResult.unschedulable``), the ones ``tessera status``
shows live, grouped.  The split is of waiting time, not of the p95: it says where large jobs'
waiting goes, and so which rule could shorten it.
"""

from __future__ import annotations

from shared.core.framework import Status

CAUSES = ("holds-room", "share", "reserved", "no-room", "depth", "order", "other")

LARGE_GPUS = 5.0
"""Jobs of this many GPUs or more at full size are counted: the ``8`` and ``>8`` size classes."""

_BY_PLUGIN = {
    "Allowed": "reserved",
    "QueueDepth": "depth",
    "CycleBudget": "depth",
    "StrictOrder": "order",
    "QueueMax": "other",
}


def wait_cause(holds_room: bool, share: float, status: Status | None) -> str:
    """The cause a waiting large job is counted under; ``share`` is its queue's GPUs held over
    GPUs deserved at the sample, ``status`` why the last cycle left it waiting (None: no reason
    given, such as a job backing off)."""
    if holds_room:
        return "holds-room"
    if share >= 1.0 - 1e-9:
        return "share"
    if status is None:
        return "other"
    return _BY_PLUGIN.get(status.plugin, "no-room")
