"""An empirical run-time distribution: Philly's measured job run times, for a workload variant.

Gavel's Philly-derived traces take each job's run time from the job type their generator
assigned (``total_steps / steps_per_s``): a median of 1.7 h, a mean of 28 h and a p99 of 620 h.
The run times Philly itself logged (83,154 jobs, as Alibaba's 2020 trace analysis extracted them)
are far shorter and as heavy-tailed: a median of 20 min, a mean of 4 h, a p99 of 80 h.  Drawing
each job's run time from that list instead is a variant of the trace with the same arrivals,
sizes and tenants but another run-time law, so a policy's gains can be checked against one
they were not developed on.  The list names no GPU count, so a draw does not depend on the job's
size (the trace's large jobs ran longer: the variant understates their work).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.sim.trace import TraceError

FloatArray = npt.NDArray[np.float64]

SHORTEST_S = 1.0
"""A logged run time below a second (the list has two zeros) runs for a second."""


def load_runtimes(path: Path) -> FloatArray:
    """Run times in seconds, one per line after a header line; sorted ascending."""
    try:
        handle = path.open()
    except OSError as exc:
        raise TraceError(path, 0, f"cannot open: {exc.strerror}") from None
    values: list[float] = []
    with handle:
        next(handle, None)  # the header
        for line, text in enumerate(handle, start=2):
            text = text.strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                raise TraceError(path, line, f"{text!r} is not a run time in seconds") from None
            if not np.isfinite(value) or value < 0:
                raise TraceError(path, line, f"{text!r} is not a run time in seconds")
            values.append(max(SHORTEST_S, value))
    if not values:
        raise TraceError(path, 1, "no run times")
    return np.sort(np.array(values, dtype=np.float64))


def expected_clipped(runtimes: FloatArray, limits: FloatArray) -> FloatArray:
    """``E[min(R, limit)]`` for each limit, R drawn uniformly from the sorted ``runtimes``.

    The cluster is sized from this, so that every seed (each drawing its own run times) gets the
    same nodes: the expected GPU-seconds each job offers before the last arrival."""
    n = len(runtimes)
    below = np.searchsorted(runtimes, limits, side="right")  # run times that end before the limit
    prefix = np.concatenate(([0.0], np.cumsum(runtimes)))
    return (prefix[below] + (n - below) * limits) / n
