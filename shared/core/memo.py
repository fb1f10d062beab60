"""What one cycle may hand the next, kept by a shell that runs many cycles over slowly changing
state (a placement worker).

Only results of pure functions of a cycle's inputs are kept here, each with what it was computed
from, and reused only where those inputs are the very same objects: a memo never changes what a
cycle decides, only how long it takes (the cycle's tests run with and without one).  The core
stays free of clocks, I/O and globals; the memo is an argument like the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.jobs import Job


@dataclass(frozen=True)
class RunningDelta:
    """How a snapshot's running jobs differ from those of the snapshot numbered ``previous`` from
    the same shell: the jobs named in ``removed`` left the list (they ended, moved or changed), and
    the last ``appended`` entries are new (a changed job leaves and comes back at the end)."""

    generation: int
    previous: int
    removed: frozenset[str]
    appended: int


@dataclass(frozen=True)
class PendingDelta:
    """How a snapshot's pending jobs differ from those of the snapshot numbered ``previous`` from
    the same shell: the jobs named in ``removed`` left (they started, or changed), the jobs in
    ``added`` are new (a changed job is named in both: it leaves and comes back)."""

    generation: int
    previous: int
    removed: frozenset[str]
    added: tuple[Job, ...]


@dataclass
class CycleMemo:
    victim_rows: object | None = None
    generation: int = -1
    """The snapshot ``victim_rows`` describes (its ``RunningDelta.generation``)."""
    """``actions.preempt.VictimRows`` of the last cycle that looked for victims: the running tasks
    laid out as arrays, reused for every ``Running`` object that is still in the snapshot."""
    pending_order: object | None = None
    """``actions.enqueue.PendingOrder``: the pending jobs' demand per queue and their order per
    queue, as of the snapshot it names; followed through each ``PendingDelta`` (orders whose key
    depends on the job alone), so a cycle sorts only the jobs that arrived, not the thousands
    that wait."""
    homes: object | None = None
    """``homes.HomeIndex``: each shape's homes (the nodes whose capacity holds one of its tasks),
    kept while the cluster's nodes are the very same objects, and the waiting jobs whose homes
    are scarce, followed through each ``PendingDelta``."""
